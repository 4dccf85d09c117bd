"""Learning you can see: do the shipped pipelines raise validation accuracy?

    python -m benchmarks.bench_learning                       # BIRD text-to-SQL, seeds 1 2 3 (minutes per seed)
    python -m benchmarks.bench_learning --task ranking        # the ranking task, seeds 1 2 3
    python -m benchmarks.bench_learning --task bird_async     # BIRD with the rollout running ahead (separate_async)
    python -m benchmarks.bench_learning --task bird_agent     # BIRD, the model querying its database first
    python -m benchmarks.bench_learning --task ranking_rm     # ranking scored by a reward model (rule-scored validation)
    python -m benchmarks.bench_learning --task ranking_distill  # a small student taught by a teacher
    python -m benchmarks.bench_learning --task bird_agent --side-by-side --minutes 15   # single vs multi-turn
    python -m benchmarks.bench_learning --plot results/learning.json results/learning_async.json -o docs/learning_async.png
    python -m benchmarks.bench_learning --quick               # a 2-step smoke of the same path, seed 1
    python -m benchmarks.bench_learning --seeds 2 --set trainer.total_steps=10
    python -m benchmarks.bench_learning --task ranking --algorithm dapo   # a GRPO-family recipe, seeds 1 2 3
    python -m benchmarks.bench_learning --task ranking --side-by-side    # grpo, dr_grpo, dapo, gspo, rloo, ppo

``--algorithm NAME`` runs ``pipelines/ranking_<NAME>.yaml`` instead of the task's GRPO pipeline;
``--side-by-side`` runs the recipes one seed each at equal wall time (``benchmarks.side_by_side``);
with ``--task bird_agent``, single-turn against multi-turn (``benchmarks.agent_side_by_side``).

For each seed it runs ``rlflow run <pipeline> --set trainer.seed=S --run-dir DIR`` as a
subprocess (exactly what a user types), times it, and reads ``DIR/metrics.jsonl``: the mean
over data sources of ``val-core/<source>/acc/mean@1`` at step 0 (greedy, before any update)
and at every step that validated. It prints a Markdown table (seed, validation questions,
before, after, rise, wall minutes) and writes the figures, the machine and the goal to
``benchmarks/results/<task's file>`` (``learning.json`` for BIRD, ``learning_ranking.json``).

Design decisions:
- The goals are the ones the README states: on each seed the run finishes within
  the task's ``--max-minutes`` (15; the BIRD agent 20) and accuracy rises by at least the task's
  ``--min-delta`` (BIRD 0.15, ranking and the BIRD agent 0.10, i.e. 15 and 10 points): ``after``, the
  mean of the last three validations, against ``before``, the one at step 0, so that one lucky or
  unlucky validation neither meets nor misses a goal; the agent
  must also keep calling its tool (``num_turns/mean`` above 1 on every step). Distillation's goal is the
  student closing at least half of its gap to the teacher (the teacher's greedy accuracy on the same
  validation split, from its ``warm_start.json``). The exit code is 1
  when a full run misses it, so the script can gate a release.
- ``--quick`` proves the path (subprocess, metrics, table, JSON) in a couple of minutes; its
  figures mean nothing and go to ``learning_quick.json`` so they never overwrite a real result.
- Not part of the test suite: a real check takes most of an hour of CPU.
- Measured on a committed tree: with uncommitted code it refuses to start (``--allow-dirty``
  runs anyway and records ``<commit>-dirty``, which the results table shows as stale).
- Beside the wall time, the CPU time of the run's whole process tree (driver, Ray, workers) is
  recorded, with the machine's CPU count and load average: on a busy shared machine wall time
  stretches (Ray also starts its workers at a lower priority), and a reader should know.
- Each figure comes with its standard error over the ``n`` validation questions (the validation
  split as the run loads it), the binomial ``sqrt(p(1-p)/n)``; ``judge`` says why that is also the
  bound for ``after``, and how the rise's is taken. The curves are drawn with a band of one
  standard error (``picture``; run_all draws one per result file into docs/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from benchmarks import agent_side_by_side, common, side_by_side

ROOT, RESULTS = common.ROOT, common.RESULTS


@dataclass(frozen=True)
class Task:
    pipeline: str
    min_delta: float
    results: str  # file name under benchmarks/results
    max_minutes: float = 15.0
    multi_turn: bool = False  # the goal also asks num_turns/mean > 1 on every step
    teacher: str | None = None  # distillation: the teacher's model directory; the goal is half the gap closed
    beside: tuple[str, str, str] | None = None  # (record file, dotted key, label): a figure shown beside the runs


GAP_FRACTION = 0.5  # distillation: the share of the student-teacher gap each seed must close


TASKS = {
    "bird": Task("pipelines/bird_grpo.yaml", 0.15, "learning.json"),
    "ranking": Task("pipelines/ranking_grpo.yaml", 0.10, "learning_ranking.json"),
    "bird_async": Task("pipelines/bird_grpo_async.yaml", 0.15, "learning_async.json"),
    "bird_agent": Task("pipelines/bird_grpo_agent.yaml", 0.10, "learning_agent.json", 20.0, multi_turn=True),
    "ranking_rm": Task(
        "pipelines/ranking_rm.yaml",
        0.10,
        "learning_ranking_rm.json",
        beside=(
            "rlflow/assets/models/tiny-rank-rm/reward_model.json",
            "agreement.held_out.accuracy",
            "the reward model agrees with the rule on held-out responses",
        ),
    ),
    "ranking_distill": Task(
        "pipelines/ranking_distill.yaml",
        0.0,
        "learning_ranking_distill.json",
        teacher="rlflow/assets/models/tiny-rank-teacher",
    ),
}
QUICK_SETS = ("trainer.total_steps=2", "trainer.test_freq=2", "data.max_val_samples=8")
LAST = 3  # after: the mean of the last three validations after step 0 (of all of them when fewer ran)
ROUNDING = 1e-9  # float rounding allowed in a goal's comparison


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Validation accuracy before and after a shipped GRPO pipeline's run.")
    p.add_argument("--task", choices=sorted(TASKS), default="bird", help="which shipped pipeline to run")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="trainer.seed values (default 1 2 3; --quick: 1)")
    p.add_argument("--quick", action="store_true", help="2 steps, 8 validation questions: a smoke of the path")
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra --set for rlflow run (repeatable)")
    p.add_argument("--runs-root", default=str(ROOT / "runs" / "bench-learning"), help="where the run directories go")
    p.add_argument("--out", default=None, help="JSON output (default: the task's file under benchmarks/results)")
    p.add_argument("--min-delta", type=float, default=None, help="required rise of acc (default: the task's goal)")
    p.add_argument("--max-minutes", type=float, default=None, help="required wall time per run (default: the task's)")
    p.add_argument(
        "--algorithm",
        nargs="+",
        choices=side_by_side.ALGORITHMS,
        default=None,
        help="ranking recipes (pipelines/ranking_<name>.yaml); one unless --side-by-side",
    )
    p.add_argument("--side-by-side", action="store_true", help="the recipes one seed each at equal wall time")
    p.add_argument("--minutes", type=float, default=10.0, help="--side-by-side: wall minutes per recipe")
    for arm in ("single", "agent"):
        p.add_argument(
            f"--{arm}-run",
            type=Path,
            default=None,
            help=f"--task bird_agent --side-by-side: take the {arm} arm from this finished run of the same seed",
        )
    p.add_argument(
        "--plot",
        nargs="+",
        type=Path,
        default=None,
        help="no run: draw validation accuracy against wall time from these result files (-o PNG)",
    )
    p.add_argument("-o", dest="picture", type=Path, default=ROOT / "docs" / "learning_async.png")
    p.add_argument(
        "--allow-dirty", action="store_true", help="run with uncommitted code changes (recorded as <commit>-dirty)"
    )
    args = p.parse_args(argv)
    if args.algorithm and args.task != "ranking":
        p.error("--algorithm and --side-by-side run the ranking recipes: add --task ranking")
    if args.side_by_side and args.task not in ("ranking", "bird_agent"):
        p.error("--side-by-side runs the ranking recipes (--task ranking) or single vs multi-turn (--task bird_agent)")
    if args.algorithm and len(args.algorithm) > 1 and not args.side_by_side:
        p.error("name one --algorithm, or compare several with --side-by-side")
    return args


def val_accuracy(records: list[dict]) -> dict[int, float]:
    """Step -> validation accuracy (mean over sources of ``val-core/<source>/acc/mean@1``) at each step that validated."""
    out = {}
    for record in records:
        keys = [k for k in record if k.startswith("val-core/") and k.endswith("/acc/mean@1")]
        if keys:
            out[int(record["step"])] = sum(float(record[k]) for k in keys) / len(keys)
    return out


def standard_error(acc: float, n: int) -> float:
    """The binomial standard error of an accuracy ``acc`` measured on ``n`` questions."""
    return math.sqrt(acc * (1 - acc) / n)


def judge(acc: dict[int, float], n: int) -> dict:
    """``before`` (step 0), ``after`` (the mean of the last ``LAST`` validations after it) and the rise
    ``delta``, each with its standard error over the ``n`` validation questions.

    The validations of a run score the same questions, so they are correlated, not independent samples:
    ``after``'s error is that of one validation at the mean accuracy, the most that averaging each
    question's scores (in [0, 1]) can leave. The rise's adds the two errors in quadrature, as if before
    and after were independent, which overstates it when the same questions stay hard or easy.
    """
    later = sorted(step for step in acc if step > 0)[-LAST:]
    before, after = acc[0], mean(acc[step] for step in later)
    before_se, after_se = standard_error(before, n), standard_error(after, n)
    return {
        "val_n": n,
        "before": before,
        "before_se": before_se,
        "after": after,
        "after_se": after_se,
        "after_steps": later,
        "delta": after - before,
        "delta_se": math.hypot(before_se, after_se),
    }


def meets_goal(run: dict, min_delta: float, max_minutes: float, multi_turn: bool, distilled: bool) -> bool:
    """Whether one seed met the goal: the rise of ``judge`` (up to float rounding: accuracies are fractions
    of the questions, and a mean of three of them may land a hair below a goal it meets), the share of the
    gap to the teacher when ``distilled``, the wall time, and a tool call on every step when ``multi_turn``."""
    return (
        run["delta"] >= min_delta - ROUNDING
        and (not distilled or (run["gap_closed"] or 0.0) >= GAP_FRACTION - ROUNDING)
        and run["wall_minutes"] <= max_minutes
        and (not multi_turn or min(run.get("num_turns_mean_by_step") or [0.0]) > 1.0)
    )


def validation_size(pipeline: str, sets: list[str]) -> int:
    """The questions one validation scores: the pipeline's val split loaded as ``rlflow run`` loads it
    (``data.max_val_samples`` and rows left out counted)."""
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_prompt_tokenizer

    spec = load_pipeline(ROOT / pipeline, sets).spec
    val = load_split(spec, "val", ROOT, load_prompt_tokenizer(spec.model, ROOT))
    if not val:
        raise SystemExit(f"{pipeline}: no validation questions, so there is nothing to measure learning on")
    return len(val)


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path}: no metrics were written; see the run's output above")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def teacher_accuracy(model_dir: str) -> float:
    """The teacher's greedy validation accuracy, as its record states it (measured on the same split)."""
    record = json.loads((ROOT / model_dir / "warm_start.json").read_text())
    return float(record["greedy_acc"]["dev"]["acc"])


def beside_figure(beside: tuple[str, str, str]) -> dict:
    """The figure a task shows beside its runs (e.g. the reward model's agreement with the rule)."""
    path, key, label = beside
    value = json.loads((ROOT / path).read_text())
    for part in key.split("."):
        value = value[part]
    return {"label": label, "value": value, "source": f"{path}: {key}"}


def run_seed(pipeline: str, seed: int, sets: list[str], runs_root: Path, n: int) -> dict:
    """One ``rlflow run`` for ``seed``; its figures (``n``: the questions of one validation)."""
    run_dir = runs_root / f"seed{seed}"
    if (run_dir / "metrics.jsonl").exists():
        raise SystemExit(f"{run_dir} already holds a run; remove it or pass another --runs-root")
    cmd = [*common.rlflow_script(), "run", pipeline, "--set", f"trainer.seed={seed}", "--run-dir", str(run_dir)]
    for setting in sets:
        cmd += ["--set", setting]
    print("$", " ".join(cmd), flush=True)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    start, started_at = time.perf_counter(), time.time()
    # CPU seconds of the run's whole process tree beside its wall time
    with subprocess.Popen(cmd, cwd=ROOT, env=env) as proc, common.TreeSampler(proc.pid, interval=1.0) as meter:
        returncode = proc.wait()
    minutes = (time.perf_counter() - start) / 60
    if returncode != 0:
        raise SystemExit(f"seed {seed}: rlflow run exited with {returncode}")
    records = read_metrics(run_dir)
    acc = val_accuracy(records)
    if 0 not in acc or len(acc) < 2:
        raise SystemExit(
            f"{run_dir}/metrics.jsonl: need validation at step 0 and at the end, found steps {sorted(acc)}; "
            "keep trainer.val_before_train and a test_freq that hits the last step"
        )
    scores = [r.get("critic/score/mean") for r in records if r["step"] > 0]
    turns = [r["num_turns/mean"] for r in records if r["step"] > 0 and "num_turns/mean" in r]
    return {
        "seed": seed,
        **judge(acc, n),
        "wall_minutes": minutes,
        "cpu_minutes": meter.cpu_s / 60,
        "last_step": max(acc),
        "val_acc_by_step": {str(k): v for k, v in sorted(acc.items())},
        "val_minutes_by_step": validation_minutes(run_dir, started_at, acc),
        "train_score_by_step": scores,
        **({"num_turns_mean_by_step": turns} if turns else {}),
        "run_dir": str(run_dir),
    }


def validation_minutes(run_dir: Path, started_at: float, acc: dict[int, float]) -> dict[str, float]:
    """Step -> minutes from the command's start until that step's validation ended (from trace.jsonl)."""
    ends: dict[int, float] = {}
    for record in common.read_jsonl(run_dir / "trace.jsonl"):
        if record["stage"] == "validate" and record["step"] in acc:
            ends[record["step"]] = max(ends.get(record["step"], 0.0), record["end"])
    return {str(step): (end - started_at) / 60 for step, end in sorted(ends.items())}


def curve(ax, x: list[float], run: dict, steps: list[str], color: str, label: str | None) -> None:
    """One seed's validation accuracy at ``steps`` against ``x``, with a band of one standard error
    when the run records its validation size (older results do not)."""
    acc = [run["val_acc_by_step"][s] for s in steps]
    ax.plot(x, acc, color=color, marker="o", markersize=3, alpha=0.8, label=label)
    if run.get("val_n"):
        se = [standard_error(a, run["val_n"]) for a in acc]
        ax.fill_between(x, [a - e for a, e in zip(acc, se)], [a + e for a, e in zip(acc, se)], color=color, alpha=0.15)


def band_note(runs: list[dict]) -> str:
    """What the bands are, for a picture's title."""
    sizes = sorted({r["val_n"] for r in runs if r.get("val_n")})
    if not sizes:
        return "no error bands: the result does not record its validation size"
    return f"bands: ±1 standard error over {'/'.join(map(str, sizes))} questions"


def plot_against_wall_time(results: list[Path], picture: Path) -> None:
    """Each result file's seeds as validation accuracy against wall minutes, in one picture."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4))
    ax = fig.add_subplot()
    runs = []
    for index, path in enumerate(results):
        result = json.loads(path.read_text())
        for run in result["runs"]:
            minutes = run.get("val_minutes_by_step")
            if not minutes:
                raise SystemExit(f"{path}: seed {run['seed']} has no val_minutes_by_step (measured before it was kept)")
            steps = sorted(minutes, key=int)
            label = f"{result['task']} ({result['pipeline']})" if run is result["runs"][0] else None
            curve(ax, [minutes[s] for s in steps], run, steps, f"C{index}", label)
            runs.append(run)
    ax.set_xlabel("wall time (minutes from `rlflow run`)")
    ax.set_ylabel("validation accuracy (greedy)")
    ax.set_title(band_note(runs), fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    picture.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(picture, dpi=110)
    print(f"wrote {picture}")


def picture(report: dict):
    """A learning result's validation curves, one colour per seed, against the step, each with its band
    of one standard error, as a matplotlib Figure (run_all draws one per result file into docs/)."""
    from matplotlib.figure import Figure

    runs = report.get("runs", [])
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    for index, run in enumerate(runs):
        steps = sorted(run.get("val_acc_by_step", {}), key=int)
        curve(ax, [int(s) for s in steps], run, steps, f"C{index}", f"seed {run['seed']}")
    ax.set_xlabel("step")
    ax.set_ylabel("validation accuracy (greedy)")
    ax.set_title(f"{report.get('task', 'bird')}: {report.get('pipeline', '')}\n{band_note(runs)}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig


def figure(run: dict, key: str) -> str:
    """A seed's accuracy (``before``, ``after``) or rise in points (``delta``), with its standard error
    when the result records one (older results do not)."""
    se = run.get(f"{key}_se")
    if key == "delta":
        return f"{100 * run[key]:+.0f}" if se is None else f"{100 * run[key]:+.1f} ± {100 * se:.1f}"
    return f"{run[key]:.2f}" if se is None else f"{run[key]:.2f} ± {se:.3f}"


def table(runs: list[dict]) -> str:
    lines = [
        "| seed | val acc before | after | delta (points) | val questions | wall (min) | CPU (min) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['seed']} | {figure(r, 'before')} | {figure(r, 'after')} | {figure(r, 'delta')} "
            f"| {r.get('val_n', 'n/a')} | {r['wall_minutes']:.1f} | {r['cpu_minutes']:.1f} |"
        )
    return "\n".join(lines)


def machine() -> dict:
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_end": list(load) if load else None,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        plot_against_wall_time(args.plot, args.picture)
        return 0
    if args.side_by_side:
        runs_root = Path(args.runs_root) / "side-by-side" / time.strftime("%Y%m%d-%H%M%S")
        algorithms = args.algorithm or list(side_by_side.ALGORITHMS)
        seed = (args.seeds or [1])[0]
        if args.task == "bird_agent":
            return agent_side_by_side.agent_side_by_side(
                seed, args.minutes, args.quick, args.sets, runs_root, args.out, (args.single_run, args.agent_run)
            )
        return side_by_side.side_by_side(algorithms, seed, args.minutes, args.quick, args.sets, runs_root, args.out)
    task = TASKS[args.task]
    if args.algorithm and args.algorithm[0] != "grpo":
        name = args.algorithm[0]
        task = Task(side_by_side.pipeline_of(name), task.min_delta, f"learning_ranking_{name}.json")
    min_delta = task.min_delta if args.min_delta is None else args.min_delta
    seeds = args.seeds or ([1] if args.quick else [1, 2, 3])
    sets = (list(QUICK_SETS) if args.quick else []) + args.sets
    runs_root = Path(args.runs_root) / args.task / time.strftime("%Y%m%d-%H%M%S")
    commit_at_start = common.commit_id()  # the code the runs use, before anything else changes the tree
    if commit_at_start.endswith("-dirty") and not args.quick and not args.allow_dirty:
        print(
            "error: the tree has uncommitted code changes, so the result could not say which code learned; "
            "commit them first (or pass --allow-dirty: the row then says it was measured on a dirty tree)",
            file=sys.stderr,
        )
        return 2
    n = validation_size(task.pipeline, sets)
    runs = [run_seed(task.pipeline, seed, sets, runs_root, n) for seed in seeds]
    max_minutes = args.max_minutes or task.max_minutes
    teacher = teacher_accuracy(task.teacher) if task.teacher else None
    if teacher is not None:
        for r in runs:
            gap = teacher - r["before"]
            r["gap_closed"] = r["delta"] / gap if gap > 0 else None
    passed = all(meets_goal(r, min_delta, max_minutes, task.multi_turn, teacher is not None) for r in runs)
    print()
    print(table(runs))
    result = {
        "task": args.task,
        "pipeline": task.pipeline,
        "quick": args.quick,
        "extra_sets": sets,
        "goal": {
            "min_delta": min_delta,
            "after": f"mean of the last {LAST} validations",
            "max_minutes": max_minutes,
            **({"min_num_turns": 1.0} if task.multi_turn else {}),
            **({"gap_fraction": GAP_FRACTION, "teacher_acc": teacher} if teacher is not None else {}),
        },
        **({"beside": beside_figure(task.beside)} if task.beside else {}),
        "passed": passed,
        "commit": commit_at_start,
        "machine": machine(),
        "runs": runs,
    }
    out = (
        Path(args.out)
        if args.out
        else RESULTS / (task.results.replace(".json", "_quick.json") if args.quick else task.results)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    target = (
        f"closes {100 * GAP_FRACTION:.0f}% of the gap to the teacher ({teacher:.2f})"
        if teacher is not None
        else f"+{100 * min_delta:.0f} points"
    )
    print(
        f"\n{'goal met' if passed else 'goal NOT met'}: every seed {target} (the mean of the last {LAST} "
        f"validations against the first) within "
        f"{max_minutes:.0f} min{' with num_turns/mean > 1' if task.multi_turn else ''}; figures in {out}"
    )
    return 0 if passed or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
