"""The default BIRD run's step time on an idle machine and beside a CPU burner, for the default
CPU reservation and for a reservation larger than the machine.

    python -m benchmarks.bench_load            # 1 round of 4 arms (about 6 min on 2 cores)
    python -m benchmarks.bench_load --quick    # tiny sizes, 2 steps each

Each arm is ``rlflow run pipelines/bird_grpo.yaml`` at the pipeline's own sizes (16 prompts x 8
samples x 48 tokens), without validation or checkpoints inside the timed steps; its figure is the
median ``timing_s/step`` of the steps after the first (which warms caches up): 5 steps for the default
reservation, 2 for the oversubscribed contrast (its loaded step takes about 2 minutes and is some 30x the
idle one, so one timed step shows it).

- Reservations: ``default`` is the pipeline as shipped (the actor on 1 CPU, so 1 torch thread, and
  one 1-CPU reward worker: 2 CPUs in all); ``oversubscribed`` gives the actor 2 CPUs (2 torch
  threads) and two 1-CPU reward workers, 4 CPUs in all, which is what the pipeline reserved before.
- Loads: ``idle`` is the machine as it is; ``loaded`` adds one busy process (a Python loop) pinned
  to the first core for the arm's whole run, as any other job on a shared laptop or CI runner would.

Goal: with the default reservation, the loaded step takes at most 1.5 x the idle one. The
oversubscribed arm shows what the default avoids (its torch threads wait on the core the burner
holds, at every parallel region).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import common

NAME = "load"
PIPELINE = "pipelines/bird_grpo.yaml"
LOADED_GOAL = 1.5
BASE_SETS = ("trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1")
RESERVATIONS = {
    "default": (),
    "oversubscribed": (
        "resources.actor_pool.cpus_per_worker=2",
        "resources.reward_pool.workers=2",
        "resources.reward_pool.cpus_per_worker=1",
    ),
}
LOADS = ("idle", "loaded")
ARMS = tuple(f"{r}/{load}" for r in RESERVATIONS for load in LOADS)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, 2 steps per arm")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--steps", type=int, default=None, help="steps per arm (default 5, 2 with --quick)")
    p.add_argument(
        "--contrast-steps",
        type=int,
        default=2,
        help="steps of the oversubscribed arms (default 2: one timed step shows a 30x contrast, at 2 min a step)",
    )
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS), help="which arms run (default: all four)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per arm")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


class Burner:
    """One busy Python loop pinned to the first core, for the life of the ``with`` block."""

    def __enter__(self) -> Burner:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        os.sched_setaffinity(self.proc.pid, {min(os.sched_getaffinity(0))})
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def run_arm(reservation: str, load: str, sets: list[str], steps: int, place: Path, timeout: float) -> dict:
    arm_sets = [*sets, *RESERVATIONS[reservation], f"trainer.total_steps={steps}"]
    run_dir, log = place / f"{reservation}-{load}", place / f"{reservation}-{load}.log"
    if load == "loaded":
        with Burner():
            result = common.run_rlflow(PIPELINE, arm_sets, run_dir, log=log, timeout=timeout)
    else:
        result = common.run_rlflow(PIPELINE, arm_sets, run_dir, log=log, timeout=timeout)
    steps = common.step_times(result.pop("metrics"), skip=1)
    result.pop("trace")
    return {"step_s": common.median(steps), "steps_s": steps, **result}


def main(argv=None) -> None:
    args = parse_args(argv)
    steps = args.steps or (2 if args.quick else 5)
    model_dir, model_label = common.bench_model_dir()
    arm_steps = {"default": steps, "oversubscribed": min(steps, args.contrast_steps)}
    sets = [f"model_path={model_dir}", *BASE_SETS]
    sets += list(common.QUICK_SETS if args.quick else ())
    arms = args.arms
    before = common.machine()
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for r, order in enumerate(common.rotations(arms, args.rounds)):
        for arm in order:
            reservation, load = arm.split("/")
            print(f"round {r + 1}/{args.rounds}: {arm} ...", flush=True)
            place = common.ROOT / "runs" / "bench-load" / f"round{r + 1}"
            result = run_arm(reservation, load, sets, arm_steps[reservation], place, args.timeout)
            runs[arm].append(result)
            print(
                f"  step {common.fmt(result['step_s'])} s (steps {[round(s, 2) for s in result['steps_s']]})"
                + (f" ERROR {result['error'][-300:]}" if "error" in result else ""),
                flush=True,
            )
    step = {arm: common.median(res["step_s"] for res in runs.get(arm, [])) for arm in ARMS}  # None: not run
    slowdown = {res: common.ratio(step[f"{res}/loaded"], step[f"{res}/idle"]) for res in RESERVATIONS}
    print(common.markdown_table(["arm", "step s"], [[arm, step[arm]] for arm in arms]))
    ok = None if slowdown["default"] is None else slowdown["default"] <= LOADED_GOAL
    summary = [
        common.goal_row(
            NAME,
            "default run's step, idle / one core busy (`python -m benchmarks.bench_load`)",
            slowdown["default"],
            f"loaded <= {LOADED_GOAL:g}x idle",
            ok,
            f"{common.fmt(step['default/idle'])} s idle, {common.fmt(step['default/loaded'])} s loaded "
            f"({common.fmt(slowdown['default'])}x)",
        ),
        common.goal_row(
            NAME,
            "the same with 4 CPUs reserved on this machine (actor 2 threads)",
            slowdown["oversubscribed"],
            "(contrast)",
            None,
            f"{common.fmt(step['oversubscribed/idle'])} s idle, {common.fmt(step['oversubscribed/loaded'])} s "
            f"loaded ({common.fmt(slowdown['oversubscribed'])}x)",
        ),
    ]
    report = {
        "model": model_label,
        "steps_per_arm": steps,
        "steps_per_contrast_arm": arm_steps["oversubscribed"],
        "machine": {
            **before,
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_1m_after": common.machine()["load_avg_1m"],
        },
        "step_s": step,
        "loaded_over_idle": slowdown,
        "runs": runs,
        "summary": summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
