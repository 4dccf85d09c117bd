"""Step time: ``rlflow run`` next to the same step loop in-process, and next to TRL's GRPOTrainer.

    python -m benchmarks.bench_step                  # 3 interleaved rounds of 5 steps per arm
    python -m benchmarks.bench_step --quick          # tiny sizes, 1 round: proves the path
    python -m benchmarks.bench_step --arms rlflow loop

Three arms, each in a fresh process, on the same model, data and sizes (16 prompts x 8
samples x 48 tokens, one optimizer step per step, micro-batches of 8):

- ``rlflow``: ``rlflow run pipelines/bird_grpo.yaml`` exactly as a user runs it (Ray, a local
  actor pool and a 2-worker reward pool); its ``timing_s/step`` from metrics.jsonl;
- ``loop``: the runtime's own step loop (``StepLoop``) over the in-process executor: every
  resource as one worker in this process, no Ray, the same stage code in the compiled plan's
  order (verl's); this is the floor the Ray runtime is measured against (goal:
  rlflow / loop <= 1.05);
- ``trl``: TRL's GRPOTrainer doing the same work in its own venv (see trl_grpo_run.py;
  rlflow should be faster despite Ray and its extra old-log-prob pass).

Steady state is the median of the steps after the first two. Arms run in rotated order
round after round, so drifting load hits every arm alike; each round's ratio compares the arms
of that round, the headline is the median of those ratios with their spread, and a goal is met
only when it holds in every round (``common.round_ratio_row``), so three rounds: with two, one
noisy round decides the verdict alone. Beside wall time, each step's CPU seconds (the whole
process tree: Ray's processes, workers and driver for rlflow; the one process for the loop and
TRL) are reported: they move far less with the neighbours' load, so their ratio backs up the
wall-time one. ``picture`` draws the rounds (docs/step_time.png, through run_all).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks import common
from rlflow.stages.base import VERL_ORDER

NAME = "step"
PIPELINE = "pipelines/bird_grpo.yaml"
ARMS = ("rlflow", "loop", "trl")
# the timers of the stages every step runs (checkpoints and validation are off in every arm)
STAGE_TIMERS = tuple(t for t in VERL_ORDER if t not in ("save_checkpoint", "testing"))
LOOP_GOAL = 1.05


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=3)
    p.add_argument(
        "--steps", type=int, default=None, help="steps per run (default 5; --quick: 3); the first 2 are warm-up"
    )
    p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    p.add_argument("--timeout", type=float, default=3600, help="seconds per run before it is killed")
    p.add_argument("--loop-run", type=Path, help=argparse.SUPPRESS)  # internal: run the plain loop, write JSON here
    p.add_argument("--set", dest="sets", action="append", default=[], help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- the in-process loop (runs in its own process) ---------------------------------------------
def plain_loop(sets: list[str], steps: int, out: Path) -> None:
    """The runtime's own step loop over the in-process executor: the same stages and order, no Ray."""
    import tempfile

    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.inprocess import InProcessExecutor
    from rlflow.runtime.run_dir import RunDir
    from rlflow.runtime.step_loop import StepLoop, load_data

    loaded = load_pipeline(common.ROOT / PIPELINE, [*sets, f"trainer.total_steps={steps}"])
    spec, plan = loaded.spec, compile_plan(loaded.spec)
    record: dict = {"steps": []}
    with tempfile.TemporaryDirectory() as work:
        run_dir = RunDir(Path(work))
        executor = InProcessExecutor(plan, spec, str(common.ROOT), run_dir.append_trace, str(run_dir.path))
        try:
            loop = StepLoop(spec, plan, executor, run_dir, load_data(spec, common.ROOT), loaded.resolved_yaml(), [])
            first, mode = loop.init(None), loop.mode
            mode.on_init_end(first)
            for step in range(first, loop.total + 1):
                wall_start = time.time()
                metrics = mode.step(step)
                mode.on_step_end(step, metrics)
                record["steps"].append(
                    {
                        "step": step,
                        "start": wall_start,
                        "end": time.time(),
                        **{k: v for k, v in metrics.items() if k.startswith("timing_s/")},
                        "response_length/mean": metrics["response_length/mean"],
                    }
                )
        finally:
            executor.close()
    out.write_text(json.dumps(record, indent=2) + "\n")


# ---- the arms ---------------------------------------------------------------------------------
def run_arm(arm: str, sets: list[str], steps: int, work: Path, timeout: float) -> dict:
    """One run of ``arm``: per-step records (step, timing_s/*, cpu_s/step, response_length/mean), wall time."""
    log = work / f"{arm}.log"
    if arm == "rlflow":
        result = common.run_rlflow(
            PIPELINE, [*sets, f"trainer.total_steps={steps}"], work / "rlflow-run", log=log, timeout=timeout
        )
        records = result.pop("metrics")
        result.pop("trace")
    elif arm == "loop":
        out = work / "loop.json"
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.bench_step",
            "--loop-run",
            str(out),
            "--steps",
            str(steps),
            *[f"--set={s}" for s in sets],
        ]
        result = common.run_process(cmd, log=log, timeout=timeout)
        records = json.loads(out.read_text())["steps"] if result["exit_code"] == 0 else []
    else:
        if not common.TRL_PYTHON.exists():
            return {"skipped": "TRL is not installed (bash scripts/setup_trl_venv.sh creates .venv-trl)", "records": []}
        out = work / "trl.json"
        model = next(s.split("=", 1)[1] for s in sets if s.startswith("model_path="))
        cmd = [
            str(common.TRL_PYTHON),
            "-m",
            "benchmarks.trl_grpo_run",
            "--model-dir",
            model,
            "--steps",
            str(steps),
            "--out",
            str(out),
            *[f"--set={s}" for s in sets if not s.startswith("model_path=")],
        ]
        result = common.run_process(cmd, log=log, timeout=timeout)
        records = _trl_records(json.loads(out.read_text())) if result["exit_code"] == 0 else []
    if result["exit_code"] != 0:
        result["error"] = common.tail(log)
    samples = result.pop("cpu_samples", None)  # the loop's and TRL's; rlflow's are already spent per step
    result.pop("cpu_samples_by_process", None)
    for r in records:
        if "start" in r:  # the loop and TRL: CPU of their process over the step's window
            r["cpu_s/step"] = common.cpu_between(samples, r["start"], r["end"])
    result["records"] = records
    return result


def _trl_records(trl: dict) -> list[dict]:
    lengths = trl.get("mean_completion_length", [])
    ends = [s["end"] for s in trl["steps"]]
    starts = [trl["train_begin"], *ends[:-1]]
    return [
        {
            "step": i + 1,
            "start": starts[i],
            "end": ends[i],
            "timing_s/step": s,
            **({"response_length/mean": lengths[i]} if i < len(lengths) else {}),
        }
        for i, s in enumerate(trl["step_s"])
    ]


def summarize(runs: dict[str, list[dict]], skip: int) -> dict:
    """Per arm: pooled steady-state medians (step, stages, response length); per round: ratios."""
    arms = {}
    for arm, results in runs.items():
        records = [r for res in results for r in res.get("records", []) if r["step"] > skip]
        per_round = [
            common.median(r["timing_s/step"] for r in res.get("records", []) if r["step"] > skip) for res in results
        ]
        cpu_per_round = [
            common.median(r.get("cpu_s/step") for r in res.get("records", []) if r["step"] > skip) for res in results
        ]
        arms[arm] = {
            "step_s_median": common.median(r["timing_s/step"] for r in records),
            "step_s_per_round": per_round,
            "cpu_s_median": common.median(r.get("cpu_s/step") for r in records),
            "cpu_s_per_round": cpu_per_round,
            "samples": len(records),
            "stage_s_median": {
                t: common.median(r.get(f"timing_s/{t}") for r in records)
                for t in STAGE_TIMERS
                if any(f"timing_s/{t}" in r for r in records)
            },
            "response_length_mean": common.median(r.get("response_length/mean") for r in records),
            "cpu_s_by_process_median": common.cpu_by_process_median(records),
            "skipped": next((res["skipped"] for res in results if "skipped" in res), None),
            "errors": [res["error"] for res in results if "error" in res],
        }
    return arms


def ratios(arms: dict) -> dict:
    out = {}
    rl = arms.get("rlflow", {})
    for other in ("loop", "trl"):
        if other in arms and rl:
            rounds = [common.ratio(a, b) for a, b in zip(rl["step_s_per_round"], arms[other]["step_s_per_round"])]
            out[f"rlflow_over_{other}"] = common.ratio(rl["step_s_median"], arms[other]["step_s_median"])
            out[f"rlflow_over_{other}_per_round"] = rounds
            out[f"rlflow_over_{other}_cpu"] = common.ratio(rl["cpu_s_median"], arms[other]["cpu_s_median"])
    return out


def summary_rows(arms: dict) -> list[dict]:
    """rlflow's step time over each other arm's, round by round (each round runs the arms side by side)."""
    rows = []
    rl = arms.get("rlflow", {})
    goals = {"loop": (f"<= {LOOP_GOAL}", lambda r: r <= LOOP_GOAL), "trl": ("< 1 (faster than TRL)", lambda r: r < 1.0)}
    figures = {"loop": "rlflow run step time / plain in-process loop", "trl": "rlflow run step time / TRL GRPOTrainer"}
    for other in ("loop", "trl"):
        if other not in arms or not rl:
            continue
        them = arms[other]
        pairs = zip(rl.get("step_s_per_round", []), them.get("step_s_per_round", []))
        seconds = ", ".join(f"{common.fmt(a)} vs {common.fmt(b)} s" for a, b in pairs)
        cpu = [common.ratio(a, b) for a, b in zip(rl.get("cpu_s_per_round", []), them.get("cpu_s_per_round", []))]
        cpu_text = ", ".join(common.fmt(c) for c in cpu if c is not None)
        rows.append(
            common.round_ratio_row(
                NAME,
                figures[other],
                rl.get("step_s_per_round", []),
                them.get("step_s_per_round", []),
                goals[other][0],
                goals[other][1],
                f"{seconds}; CPU s/step ratio per round {cpu_text or 'n/a'}",
                (them.get("skipped") or "") if other == "trl" else "",
            )
        )
    return rows


ARM_LABELS = {"rlflow": "rlflow run", "loop": "in-process loop\n(no Ray)", "trl": "TRL GRPOTrainer"}


def picture(report: dict):
    """A result file's step times as a matplotlib Figure: per arm a bar at the median of its rounds and a
    dot for each round, one colour per round in every arm (run_all draws it into docs/step_time.png)."""
    from matplotlib.figure import Figure

    arms = report.get("arms", {})
    rounds = max((len(a.get("step_s_per_round", [])) for a in arms.values()), default=0)
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    for x, figures in enumerate(arms.values()):
        per_round = figures.get("step_s_per_round", [])
        valid = [s for s in per_round if s is not None]
        if not valid:
            ax.text(x, 0, "not run", ha="center", va="bottom", color="#5f6368")
            continue
        middle = common.median(valid)
        ax.bar(x, middle, width=0.6, color="#c6d4e1", edgecolor="#4a6f8f")
        ax.annotate(f"{middle:.1f} s", (x + 0.32, middle), ha="left", va="center", fontsize=8)
        for r, seconds in enumerate(per_round):
            if seconds is not None:
                ax.plot(x + 0.1 * (r - (rounds - 1) / 2), seconds, "o", color=f"C{r}", markersize=5, zorder=3)
    for r in range(rounds):
        ax.plot([], [], "o", color=f"C{r}", label=f"round {r + 1}")
    highest = max((s for a in arms.values() for s in a.get("step_s_per_round", []) if s is not None), default=1.0)
    ax.set_xticks(range(len(arms)), [ARM_LABELS.get(arm, arm) for arm in arms])
    ax.set_xlim(-0.6, len(arms) - 0.2)
    ax.set_ylim(0, 1.2 * highest)  # room for the legend above the highest dot
    ax.set_ylabel("seconds per step (median after warm-up)")
    ax.set_title(f"GRPO step time, {rounds} rounds side by side\nmodel: {report.get('model', 'n/a')}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    if rounds:
        ax.legend(fontsize=8, loc="upper center", ncols=rounds, frameon=False)
    fig.tight_layout()
    return fig


def rows_from_report(report: dict) -> list[dict]:
    """The summary rows of a result file, by the current rules (run_all uses this for older files too)."""
    return summary_rows(report.get("arms", {}))


def main(argv=None) -> None:
    args = parse_args(argv)
    steps = args.steps or (3 if args.quick else 5)
    if args.loop_run:
        return plain_loop(args.sets, steps, args.loop_run)
    rounds = args.rounds or (1 if args.quick else 3)
    model_dir, model_label = common.bench_model_dir()
    sets = [f"model_path={model_dir}", *common.STEP_SETS, *(common.QUICK_SETS if args.quick else ())]
    work = common.ROOT / "runs" / "bench-step"
    skip = 2 if steps > 2 else 0
    load_before = common.machine()
    runs: dict[str, list[dict]] = {arm: [] for arm in args.arms}
    for r, order in enumerate(common.rotations(args.arms, rounds)):
        for arm in order:
            print(f"round {r + 1}/{rounds}: {arm} ({steps} steps) ...", flush=True)
            result = run_arm(arm, sets, steps, work / f"round{r + 1}", args.timeout)
            runs[arm].append(result)
            times = [round(x["timing_s/step"], 2) for x in result.get("records", [])]
            print(
                f"  {arm}: step times {times}{' ' + result['error'][-300:] if 'error' in result else ''}"
                f"{' ' + result['skipped'] if 'skipped' in result else ''}",
                flush=True,
            )
    arms = summarize(runs, skip)
    rat = ratios(arms)
    rows = summary_rows(arms)
    timers = [t for t in STAGE_TIMERS if any(t in a["stage_s_median"] for a in arms.values())]  # the step's stages
    headers = ["arm", "step s (median)", "CPU s/step", *[f"{t} s" for t in timers], "response len", "samples"]
    table = [
        [
            arm,
            a["step_s_median"],
            a["cpu_s_median"],
            *[a["stage_s_median"].get(t) for t in timers],
            a["response_length_mean"],
            a["samples"],
        ]
        for arm, a in arms.items()
    ]
    print(common.markdown_table(headers, table))
    for key, value in rat.items():
        print(f"{key}: {value if isinstance(value, list) else common.fmt(value)}")
    for arm, a in arms.items():
        if a["cpu_s_by_process_median"]:
            print(
                f"{arm} CPU s/step by process: "
                + ", ".join(f"{k} {common.fmt(v)}" for k, v in a["cpu_s_by_process_median"].items())
            )
    report = {
        "machine": {**load_before, "load_avg_1m_after": common.machine()["load_avg_1m"]},
        "model": model_label,
        "sizes": dict(common.SIZES) if not args.quick else "quick",
        "sets": sets,
        "steps_per_run": steps,
        "warmup_steps_skipped": skip,
        "rounds": rounds,
        "actor_threads": "the actor pool's cpus_per_worker, in the rlflow and loop arms alike",
        "arms": arms,
        "ratios": rat,
        "summary": rows,
        "runs": {
            arm: [
                {k: v for k, v in res.items() if k != "records"}
                | {
                    "step_s": [x["timing_s/step"] for x in res.get("records", [])],
                    "cpu_s": [x.get("cpu_s/step") for x in res.get("records", [])],
                }
                for res in results
            ]
            for arm, results in runs.items()
        },
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
