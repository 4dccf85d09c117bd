"""The GRPO family side by side on the ranking task: each recipe for the same wall time, one table, one picture.

``python -m benchmarks.bench_learning --task ranking --side-by-side`` runs every recipe named
by ``--algorithm`` (default grpo, dr_grpo, dapo, gspo, rloo, ppo: ``pipelines/ranking_<name>.yaml``)
for ``--minutes`` of wall time each, one seed, one after the other, then writes:
``benchmarks/results/algorithms_ranking.json`` (the figures, the machine, the commit), the
picture ``docs/algorithms_ranking.png`` (validation accuracy over wall minutes, one line per
recipe) and the table between ``<!-- algorithms:start -->`` and ``<!-- algorithms:end -->`` in
docs/benchmarks.md.

Design decisions:
- Equal wall time, not equal steps: the recipes differ in what a step costs (DAPO generates
  again until its batch is full), and a user pays for time. Each run is ``rlflow run`` with a
  step count it cannot reach, stopped with SIGTERM (rlflow stops as on Ctrl-C, exit 143) once
  ``--minutes`` have passed since its first stage; its figure is its last validation within the
  budget (validation every ``test_freq`` steps, and before training).
- A point's time is read from the run's ``trace.jsonl``: minutes from the start of the first
  stage to the end of that step's validation, so Ray's start-up is left out for every recipe.
- ``--quick`` runs 2 steps per recipe without the budget: a smoke of the path whose figures
  mean nothing; it writes ``algorithms_ranking_quick.json`` only and leaves the docs alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from benchmarks import common

ROOT, RESULTS = common.ROOT, common.RESULTS
ALGORITHMS = ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "ppo")
DOC = ROOT / "docs" / "benchmarks.md"
PICTURE = ROOT / "docs" / "algorithms_ranking.png"
MARKERS = ("<!-- algorithms:start -->", "<!-- algorithms:end -->")
BUDGET_SETS = ("trainer.total_steps=100000", "trainer.test_freq=10", "trainer.save_freq=-1")


def pipeline_of(algorithm: str) -> str:
    return f"pipelines/ranking_{algorithm}.yaml"


def run_recipe(
    algorithm: str, seed: int, sets: list[str], run_dir: Path, minutes: float | None, pipeline: str | None = None
) -> dict:
    """One ``rlflow run`` of the recipe (``pipeline``, by default ``pipeline_of(algorithm)``), stopped after
    ``minutes`` of stages (None: let it finish)."""
    if (run_dir / "metrics.jsonl").exists():
        raise SystemExit(f"{run_dir} already holds a run; remove it or pass another --runs-root")
    pipeline = pipeline or pipeline_of(algorithm)
    cmd = [*common.rlflow_script(), "run", pipeline, "--set", f"trainer.seed={seed}"]
    cmd += ["--run-dir", str(run_dir)]
    for setting in sets:
        cmd += ["--set", setting]
    print("$", " ".join(cmd), flush=True)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with subprocess.Popen(cmd, cwd=ROOT, env=env) as proc:
        returncode, stopped = _wait(proc, run_dir, minutes)
    # stopped at the budget: 143, or 130 when the signal lands inside a Ray call (which raises it as Ctrl-C)
    if returncode != 0 and not (stopped and returncode in (130, 143)):
        raise SystemExit(f"{algorithm}: rlflow run exited with {returncode}")
    return read_recipe(algorithm, seed, run_dir, minutes, pipeline)


def read_recipe(algorithm: str, seed: int, run_dir: Path, minutes: float | None, pipeline: str) -> dict:
    """A finished run's figures, cut at ``minutes`` of stages (None: all of it)."""
    from benchmarks.bench_learning import read_metrics, val_accuracy

    records = read_metrics(run_dir)
    at = step_minutes(run_dir)
    acc = {step: value for step, value in val_accuracy(records).items() if minutes is None or at[step] <= minutes}
    if 0 not in acc:
        raise SystemExit(f"{run_dir}: no validation before training; keep trainer.val_before_train")
    last = max(acc)
    trained = [r for r in records if r["step"] > 0]
    return {
        "algorithm": algorithm,
        "pipeline": pipeline,
        "seed": seed,
        "before": acc[0],
        "after": acc[last],
        "delta": acc[last] - acc[0],
        "steps": len(trained),
        "last_validated_step": last,
        "minutes_at_last_validation": at[last],
        "curve": [[at[step], value] for step, value in sorted(acc.items())],
        "gen_batches": sum(r.get("train/num_gen_batches", 1.0) for r in trained),
        "step_seconds": _mean([r["timing_s/step"] for r in trained if "timing_s/step" in r]),
        "response_length_mean": _mean([r["response_length/mean"] for r in trained if "response_length/mean" in r]),
        "num_turns_mean": _mean([r["num_turns/mean"] for r in trained if "num_turns/mean" in r]),
        "num_turns_min_of_means": min((r["num_turns/mean"] for r in trained if "num_turns/mean" in r), default=None),
        "run_dir": str(run_dir),
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _wait(proc: subprocess.Popen, run_dir: Path, minutes: float | None) -> tuple[int, bool]:
    """Wait for the run; past the budget (counted from its first stage) stop it as Ctrl-C would.
    Its exit status, and whether it was stopped."""
    if minutes is None:
        return proc.wait(), False
    trace = run_dir / "trace.jsonl"
    started = None
    while proc.poll() is None:
        if started is None and trace.exists() and trace.stat().st_size:
            started = time.time()
        if started is not None and time.time() - started > minutes * 60:
            proc.send_signal(signal.SIGTERM)  # rlflow alone: it stops its Ray processes itself
            return proc.wait(), True
        time.sleep(1.0)
    return proc.returncode, False


def step_minutes(run_dir: Path) -> dict[int, float]:
    """Step -> minutes from the first stage's start to the end of that step's last record (validation included)."""
    records = [json.loads(line) for line in (run_dir / "trace.jsonl").read_text().splitlines() if line.strip()]
    start = min(r["start"] for r in records)
    ends: dict[int, float] = {}
    for r in records:
        ends[int(r["step"])] = max(ends.get(int(r["step"]), 0.0), r["end"])
    return {step: (end - start) / 60 for step, end in ends.items()}


def table(runs: list[dict], minutes: float | None) -> str:
    budget = f"{minutes:g} min" if minutes is not None else "2 steps (quick)"
    lines = [
        f"| recipe | pipeline | val acc before | after {budget} | delta (points) | steps | generation batches |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['algorithm']} | `{r['pipeline']}` | {r['before']:.2f} | {r['after']:.2f} | "
            f"{100 * r['delta']:+.0f} | {r['steps']} | {r['gen_batches']:.0f} |"
        )
    return "\n".join(lines)


def picture(runs: list[dict], output: Path, minutes: float | None) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for r in runs:
        xs, ys = zip(*r["curve"])
        ax.plot(xs, ys, marker="o", markersize=3, label=r["algorithm"])
    ax.set_xlabel("wall minutes (from the first stage)")
    ax.set_ylabel("validation accuracy (mean over sources)")
    if minutes is not None:
        ax.axvline(minutes, color="#9aa0a6", linestyle=":", linewidth=1)
    ax.set_title("The GRPO family on ranking, one seed each, equal wall time")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(output, dpi=110)


def write_doc(section: str, doc: Path = DOC, markers: tuple[str, str] = MARKERS) -> None:
    """Replace the text between ``markers`` in docs/benchmarks.md with ``section``."""
    text = doc.read_text()
    start, end = markers
    if start not in text or end not in text:
        raise SystemExit(f"{doc}: the markers {start} and {end} are missing")
    head, rest = text.split(start, 1)
    doc.write_text(head + start + "\n" + section.rstrip() + "\n" + end + rest.split(end, 1)[1])


def side_by_side(algorithms: list[str], seed: int, minutes: float, quick: bool, sets: list[str], runs_root: Path, out):
    from benchmarks.bench_learning import QUICK_SETS, machine

    commit = common.commit_id()
    budget = None if quick else minutes
    extra = [*(QUICK_SETS if quick else BUDGET_SETS), *sets]
    runs = [run_recipe(a, seed, extra, runs_root / a, budget) for a in algorithms]
    print()
    print(table(runs, budget))
    result = {
        "task": "ranking",
        "quick": quick,
        "minutes_each": budget,
        "seed": seed,
        "extra_sets": extra,
        "commit": commit,
        "machine": machine(),
        "runs": runs,
    }
    out = Path(out) if out else RESULTS / ("algorithms_ranking_quick.json" if quick else "algorithms_ranking.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if not quick:
        picture(runs, PICTURE, budget)
        command = "python -m benchmarks.bench_learning --task ranking --side-by-side" + (
            f" --minutes {minutes:g}" if minutes != 10 else ""
        )
        write_doc(
            f"`{command}` (commit {commit}, {result['machine']['cpus']} CPUs, seed {seed}):\n\n"
            + table(runs, budget)
            + f"\n\n![validation accuracy over wall time]({PICTURE.name})\n"
        )
    print(f"\nfigures in {out}")
    return 0
