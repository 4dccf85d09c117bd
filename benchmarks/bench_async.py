"""The same work in lockstep and overlapped: ``trainer_mode: sync`` against ``separate_async``.

    python -m benchmarks.bench_async              # local and remote cases, 3 rounds, 8 steps per arm
    python -m benchmarks.bench_async --quick      # tiny sizes, 3 steps per arm, 1 round

Each case is one pipeline file run twice per round, interleaved: as shipped (``separate_async``) and
with ``--set trainer.trainer_mode=sync``, so both arms reserve the same pools and do the same work.
``local``: pipelines/bird_grpo_async.yaml (the rollout on a 1-CPU pool of its own, the actor on
another). ``remote``: pipelines/bird_grpo_remote_async.yaml (generate on the reference remote
backend, the actor local). A figure is the median ``timing_s/step`` of the steps after the first two;
the ratio async / sync is taken per round and its median and range reported. From each run's trace,
every resource's busy share of the timed steps' wall time shows where the overlap went.

Goals: local async <= 0.65x sync; remote async <= 0.75x sync.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmarks import common

NAME = "async"
CASES = {
    "local": ("pipelines/bird_grpo_async.yaml", 0.65),
    "remote": ("pipelines/bird_grpo_remote_async.yaml", 0.75),
}
MODES = ("sync", "separate_async")
BASE_SETS = ("trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1")
SKIP = 2  # warm-up steps left out of every figure


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, 3 steps per arm, 1 round")
    p.add_argument("--case", choices=[*CASES, "all"], default="all")
    p.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per arm (default 8, 3 with --quick)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per arm")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def run_arm(case: str, mode: str, sets: list[str], place: Path, timeout: float) -> dict:
    pipeline, _ = CASES[case]
    run_dir, log = place / f"{case}-{mode}", place / f"{case}-{mode}.log"
    result = common.run_rlflow(pipeline, [*sets, f"trainer.trainer_mode={mode}"], run_dir, log=log, timeout=timeout)
    steps = common.step_times(result.pop("metrics"), skip=SKIP)
    result["busy_share"] = common.busy_shares(result.pop("trace"), SKIP + 1)
    return {"step_s": common.median(steps), "steps_s": steps, **result}


def summarise(case: str, runs: dict[str, list[dict]]) -> tuple[dict, dict]:
    """Per-round ratios async / sync, their median and range, and the case's results-table row."""
    _, goal = CASES[case]
    pairs = zip(runs[f"{case}/sync"], runs[f"{case}/separate_async"])
    ratios = [common.ratio(a["step_s"], s["step_s"]) for s, a in pairs]
    ratios = [r for r in ratios if r is not None]
    med = common.median(ratios)
    sync_s = common.median(r["step_s"] for r in runs[f"{case}/sync"])
    async_s = common.median(r["step_s"] for r in runs[f"{case}/separate_async"])
    spread = f"rounds {common.fmt(min(ratios))}-{common.fmt(max(ratios))}" if ratios else "no round finished"
    row = common.goal_row(
        NAME,
        f"{case}: step time separate_async / sync, same pipeline (`python -m benchmarks.bench_async`)",
        med,
        f"<= {goal:g}x",
        None if not ratios else all(r <= goal for r in ratios),
        f"{common.fmt(med)}x ({spread}; {common.fmt(async_s)} s vs {common.fmt(sync_s)} s)",
    )
    return {"ratios": ratios, "median_ratio": med, "sync_s": sync_s, "async_s": async_s}, row


def main(argv=None) -> None:
    args = parse_args(argv)
    steps = args.steps or (3 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 3)
    model_dir, model_label = common.bench_model_dir()
    sets = [f"model_path={model_dir}", *BASE_SETS, f"trainer.total_steps={steps}"]
    sets += list(common.QUICK_SETS if args.quick else ())
    cases = list(CASES) if args.case == "all" else [args.case]
    arms = [f"{case}/{mode}" for case in cases for mode in MODES]
    before = common.machine()
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for r, order in enumerate(common.rotations(arms, rounds)):
        for arm in order:
            case, mode = arm.split("/")
            print(f"round {r + 1}/{rounds}: {arm} ...", flush=True)
            result = run_arm(case, mode, sets, common.ROOT / "runs" / "bench-async" / f"round{r + 1}", args.timeout)
            runs[arm].append(result)
            print(
                f"  step {common.fmt(result['step_s'])} s, busy {result['busy_share']}"
                + (f" ERROR {result['error'][-300:]}" if "error" in result else ""),
                flush=True,
            )
    figures, summary = {}, []
    for case in cases:
        figures[case], row = summarise(case, runs)
        summary.append(row)
    print(
        common.markdown_table(
            ["case", "sync s", "async s", "ratio (median)", "ratios by round"],
            [
                [c, f["sync_s"], f["async_s"], f["median_ratio"], ", ".join(common.fmt(x) for x in f["ratios"])]
                for c, f in figures.items()
            ],
        )
    )
    report = {
        "model": model_label,
        "steps_per_arm": steps,
        "skipped_steps": SKIP,
        "machine": {
            **before,
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_1m_after": common.machine()["load_avg_1m"],
        },
        "figures": figures,
        "runs": runs,
        "summary": summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
