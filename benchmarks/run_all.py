"""Run the benchmarks, then write the results table (figure, goal, met or not, commit and date) into
the README and docs/benchmarks.md.

    python -m benchmarks.run_all                      # all but the learning runs (`make bench`, under an hour)
    python -m benchmarks.run_all --learning           # the learning runs (`make bench-learning`, hours)
    python -m benchmarks.run_all --quick              # every benchmark at smoke sizes (minutes)
    python -m benchmarks.run_all --only step startup  # some of them
    python -m benchmarks.run_all --skip load
    python -m benchmarks.run_all --summary-only       # rewrite the README table and docs/benchmarks.md from the JSON

Each benchmark runs as its own process, one after another (never two at once: they would
measure each other), with its output both shown and kept in runs/bench-logs/<name>.log. A
benchmark that fails is reported in the summary and the others still run. Before the first one
starts, the run says how long it will take: each benchmark's duration at its last full run
(results/durations.json, written after each one that succeeds), else its default in ``MINUTES``.
TRL runs in its own venv: when ``.venv-trl`` is missing it is created first with
scripts/setup_trl_venv.sh (``--no-setup`` skips that; the TRL comparisons then say "not installed").

Design decisions for the summary:
- It is written from whatever result files exist, so figures of a benchmark run separately (or
  by another command, such as bench_learning) appear in it as well. A benchmark module with a
  ``rows_from_report`` turns its file into rows by the current rules (ratios judged round by
  round), so an older file is not shown by older, kinder rules.
- Every row says what it was measured on, and when: the result's ``commit`` and date when no
  code has changed since (``git diff`` of that commit against HEAD, results, Markdown, docs and tests aside),
  else "stale" in words and why: code changed since, uncommitted changes when it ran (``-dirty``),
  or no commit recorded (a file written before benchmarks recorded it). ``make bench`` and
  ``make bench-learning`` rerun them on the current code, and refuse a tree with uncommitted code
  (``--allow-dirty`` runs anyway; its rows then say so). One sentence beside the table says where
  the figures come from (the machine's cores, the model's size), so none is read as a GPU figure.
- One table, generated, in two places: the README between ``<!-- results:start -->`` and
  ``<!-- results:end -->`` and docs/benchmarks.md, which adds the result files, the learning
  curves and any ``notes`` of the JSON files. Prose that no JSON holds lives in docs/benchmarks.md
  between ``<!-- notes:start -->`` and ``<!-- notes:end -->``; the generator keeps it as it is.
  The step benchmark's rounds are drawn there too (docs/step_time.png).
- Nothing generated depends on the time of generation, so regenerating from the same files
  gives the same pages (tests/test_readme.py checks that the README's table is current). The
  picture is redrawn only when its result file changed (a digest of the result is kept in the
  PNG), so regenerating with another matplotlib does not rewrite it.
- ``--quick`` results go to ``*_quick.json`` and their table to ``results/SUMMARY_quick.md``,
  never into the README or docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

from benchmarks import bench_learning, bench_step, common

# name -> (module, extra arguments for a full run, extra arguments for --quick)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "validate": ("benchmarks.bench_validate", [], ["--quick"]),
    "compile": ("benchmarks.bench_compile", [], ["--quick"]),
    "reward": ("benchmarks.bench_reward", [], ["--quick"]),
    "generation": ("benchmarks.bench_generation", [], ["--quick"]),
    "step": ("benchmarks.bench_step", [], ["--quick"]),
    "forwarder": ("benchmarks.bench_forwarder", [], ["--quick"]),
    "startup": ("benchmarks.bench_startup", [], ["--quick"]),
    "load": ("benchmarks.bench_load", [], ["--quick"]),
    "async": ("benchmarks.bench_async", [], ["--quick"]),
    "reward_model": ("benchmarks.bench_reward_model", [], ["--quick"]),
    "gpu": ("benchmarks.bench_gpu", [], ["--quick"]),
    "learning": ("benchmarks.bench_learning", [], ["--quick"]),
    "learning_ranking": (
        "benchmarks.bench_learning",
        ["--task", "ranking"],
        ["--task", "ranking", "--quick"],
    ),
    "learning_ranking_ppo": (
        "benchmarks.bench_learning",
        ["--task", "ranking", "--algorithm", "ppo"],
        ["--task", "ranking", "--algorithm", "ppo", "--quick"],
    ),
    "learning_ranking_rm": (
        "benchmarks.bench_learning",
        ["--task", "ranking_rm"],
        ["--task", "ranking_rm", "--quick"],
    ),
    "learning_ranking_distill": (
        "benchmarks.bench_learning",
        ["--task", "ranking_distill"],
        ["--task", "ranking_distill", "--quick"],
    ),
    "learning_async": (
        "benchmarks.bench_learning",
        ["--task", "bird_async"],
        ["--task", "bird_async", "--quick"],
    ),
    "learning_agent": (
        "benchmarks.bench_learning",
        ["--task", "bird_agent"],
        ["--task", "bird_agent", "--quick"],
    ),
}
LEARNING = tuple(name for name in BENCHMARKS if name.startswith("learning"))
# Minutes of a full run on a 2-core machine, until results/durations.json records a measured one: the
# benchmark's sizes times the step times of its last result file (the learning runs: their seeds' wall minutes).
MINUTES = {
    "validate": 1.0,
    "compile": 1.0,
    "reward": 1.0,
    "generation": 1.5,
    "step": 9.0,
    "forwarder": 4.5,
    "startup": 2.0,
    "load": 5.5,
    "async": 10.0,
    "reward_model": 2.7,
    "gpu": 0.1,
    "learning": 26.0,
    "learning_ranking": 10.0,
    "learning_ranking_ppo": 17.0,
    "learning_ranking_rm": 8.0,
    "learning_ranking_distill": 8.0,
    "learning_async": 19.0,
    "learning_agent": 54.0,
}
TRL_SETUP_MINUTES = 5.0
NEEDS_TRL = ("step", "startup")
VALIDATE_WALL_GOAL_S, VALIDATE_SPEEDUP_GOAL = 0.3, 20.0
README = common.ROOT / "README.md"
PAGE = common.ROOT / "docs" / "benchmarks.md"
TABLE_MARKERS = ("<!-- results:start -->", "<!-- results:end -->")
NOTES_MARKERS = ("<!-- notes:start -->", "<!-- notes:end -->")
MARK = {True: "yes", False: "**no**", None: "n/a"}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--quick", action="store_true", help="smoke sizes; results to *_quick.json and results/SUMMARY_quick.md"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these")
    which.add_argument(
        "--learning",
        action="store_true",
        help=f"run the learning benchmarks ({', '.join(LEARNING)}); without it, full runs leave them out",
    )
    p.add_argument("--skip", nargs="+", choices=list(BENCHMARKS), default=[], help="leave these out")
    p.add_argument("--no-setup", action="store_true", help="do not create .venv-trl when it is missing")
    p.add_argument(
        "--allow-dirty",
        action="store_true",
        help="run with uncommitted code changes (the rows then say they were measured on a dirty tree)",
    )
    p.add_argument(
        "--summary-only",
        action="store_true",
        help="only rewrite the README table and docs/benchmarks.md from existing results",
    )
    return p.parse_args(argv)


def selected(args: argparse.Namespace) -> list[str]:
    """The benchmarks to run: ``--only``'s; the learning runs with ``--learning``; else the others
    (``make bench``), or all of them with ``--quick``; never those of ``--skip``."""
    if args.only:
        names = args.only
    elif args.learning:
        names = list(LEARNING)
    else:
        names = [n for n in BENCHMARKS if args.quick or n not in LEARNING]
    return [n for n in names if n not in args.skip]


def durations_file() -> Path:
    return common.RESULTS / "durations.json"


def record_duration(name: str, minutes: float) -> None:
    """Keep ``name``'s minutes of its latest successful full run, for the next run's estimate."""
    path = durations_file()
    durations = json.loads(path.read_text()) if path.exists() else {}
    durations[name] = minutes
    path.write_text(json.dumps(dict(sorted(durations.items())), indent=2) + "\n")


def estimate(names: list[str], trl_setup: bool) -> str:
    """How long ``names`` will take, from their last measured durations (defaults where none is recorded)."""
    path = durations_file()
    measured = json.loads(path.read_text()) if path.exists() else {}
    unmeasured = [n for n in names if n not in measured]
    minutes = sum(measured.get(n, MINUTES[n]) for n in names) + (TRL_SETUP_MINUTES if trl_setup else 0)
    if not unmeasured:
        source = "from the last measured durations"
    elif len(unmeasured) < len(names):
        source = f"from the last measured durations; estimated for {', '.join(unmeasured)}, not measured yet"
    else:
        source = "estimated: none measured yet"
    setup = ", creating .venv-trl first included" if trl_setup else ""
    return f"{len(names)} benchmarks, about {math.ceil(minutes)} minutes ({source}{setup})"


def ensure_trl(log_dir: Path) -> str:
    if common.TRL_PYTHON.exists():
        return "present"
    print("creating .venv-trl (scripts/setup_trl_venv.sh) ...", flush=True)
    with (log_dir / "setup_trl.log").open("w") as log:
        done = subprocess.run(
            ["bash", str(common.ROOT / "scripts" / "setup_trl_venv.sh")],
            cwd=common.ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return "created" if done.returncode == 0 else f"setup failed (see {log_dir / 'setup_trl.log'})"


def run_one(name: str, quick: bool, log_dir: Path) -> dict:
    module, full, smoke = BENCHMARKS[name]
    cmd = [sys.executable, "-m", module, *(smoke if quick else full)]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    with (log_dir / f"{name}{'_quick' if quick else ''}.log").open("w") as log:
        proc = subprocess.Popen(
            cmd,
            cwd=common.ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"},
        )
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    minutes = (time.perf_counter() - start) / 60
    print(f"=== {name}: exit {code} after {minutes:.1f} min", flush=True)
    return {"exit_code": code, "minutes": round(minutes, 2)}


# ---- the summary ------------------------------------------------------------------------------
def validate_rows(report: dict) -> list[dict]:
    """bench_validate's figures as summary rows (its JSON predates the summary convention)."""
    rl = report.get("rlflow_validate", {})
    wall, cpu = rl.get("wall_median_s"), rl.get("cpu_median_s")
    rows = [
        common.goal_row(
            "validate",
            "rlflow validate, cold process (wall median)",
            wall,
            f"< {VALIDATE_WALL_GOAL_S} s",
            None if wall is None else wall < VALIDATE_WALL_GOAL_S,
            f"{common.fmt(wall)} s (CPU {common.fmt(cpu)} s; heavy modules: "
            f"{', '.join(rl.get('heavy_modules_imported') or []) or 'none'})",
        )
    ]
    speedup = report.get("speedup_wall_median")
    verl = report.get("verl_config_error", {}).get("wall_median_s")
    rows.append(
        common.goal_row(
            "validate",
            "config error: rlflow validate vs verl (wall)",
            speedup,
            f">= {VALIDATE_SPEEDUP_GOAL:g}x faster",
            None if speedup is None else speedup >= VALIDATE_SPEEDUP_GOAL,
            None if speedup is None else f"{speedup:g}x ({common.fmt(wall)} s vs verl {common.fmt(verl)} s)",
            report.get("verl_config_error", {}).get("skipped", ""),
        )
    )
    return rows


def learning_recipe(task: str, pipeline: str = "") -> str:
    """The recipe a learning result ran: ``grpo``, or a ranking recipe's name (``pipelines/ranking_<name>.yaml``)."""
    return Path(pipeline).stem.removeprefix(f"{task}_") if pipeline.startswith(f"pipelines/{task}_") else "grpo"


def learning_command(task: str, pipeline: str = "") -> str:
    """The command behind a learning row; a ranking recipe other than GRPO's by its ``--algorithm``."""
    recipe = learning_recipe(task, pipeline)
    algorithm = f" --algorithm {recipe}" if recipe != "grpo" else ""
    return "python -m benchmarks.bench_learning" + (f" --task {task}" if task != "bird" else "") + algorithm


def learning_seed(run: dict) -> str:
    """One seed of a learning row: before -> after, with standard errors and the rise where recorded."""
    rise = f" ({bench_learning.figure(run, 'delta')} points)" if "delta_se" in run else ""
    gap = f" ({100 * run['gap_closed']:.0f}% of the gap)" if run.get("gap_closed") is not None else ""
    return (
        f"seed {run['seed']}: {bench_learning.figure(run, 'before')} -> {bench_learning.figure(run, 'after')}{rise}"
        f" in {run['wall_minutes']:.0f} min{gap}"
    )


def learning_rows(report: dict) -> list[dict]:
    task = report.get("task", "bird")
    runs = report.get("runs", [])
    goal = report.get("goal", {})
    shown = "; ".join(learning_seed(r) for r in runs)
    if "beside" in report:
        shown += f"; {report['beside']['label']}: {report['beside']['value']:.2f}"
    if "gap_fraction" in goal:
        target = f"closes {100 * goal['gap_fraction']:.0f}% of the gap to the teacher ({goal['teacher_acc']:.2f})"
    else:
        target = f"+{100 * goal.get('min_delta', 0):.0f} points"
    if "after" in goal:  # results before it was recorded: judged on the last validation
        target += f", judged on the {goal['after']} against the first,"
    return [
        common.goal_row(
            "learning",
            f"{task}: validation accuracy rise, every seed (`{learning_command(task, report.get('pipeline', ''))}`)",
            None,
            f"{target} within {goal.get('max_minutes', 0):g} min"
            + (", num_turns/mean > 1 every step" if "min_num_turns" in goal else ""),
            report.get("passed"),
            shown or "n/a",
        )
    ]


def git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=common.ROOT, capture_output=True, text=True, check=True)
        return done.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def shown(path: Path) -> Path:
    """``path`` relative to the repository when it lies inside it."""
    return path.relative_to(common.ROOT) if path.is_relative_to(common.ROOT) else path


@dataclass(frozen=True)
class Source:
    """One result file: its report, the commit its figures were measured on, and when."""

    path: Path
    report: dict
    commit: str  # ends in "*" when taken from the file's git history (the file has no commit field)
    when: str  # the date its figures were measured (else the file's last commit), "" when unknown

    @classmethod
    def read(cls, path: Path) -> Source:
        report = json.loads(path.read_text())
        last_commit, _, last_date = git("log", "-1", "--format=%h %as", "--", str(path)).partition(" ")
        commit = report.get("commit") or f"{last_commit or 'unknown'}*"
        return cls(path, report, commit, str(report.get("finished") or last_date)[:10])


def load_sources(quick: bool) -> dict[str, Source | None]:
    suffix = "_quick" if quick else ""
    return {
        name: Source.read(path) if (path := common.RESULTS / f"{name}{suffix}.json").exists() else None
        for name in BENCHMARKS
    }


def code_changed_since(commit: str) -> bool | None:
    """Whether code (anything but results, Markdown, docs and tests) differs between ``commit`` and HEAD; None when
    this checkout does not have ``commit``."""
    done = subprocess.run(
        ["git", "diff", "--quiet", commit, "HEAD", "--", ".", *common.NOT_CODE],
        cwd=common.ROOT,
        capture_output=True,
    )
    return {0: False, 1: True}.get(done.returncode)


def measured_on(commit: str, when: str) -> str:
    """A row's provenance: the commit and date when the code has not changed since, else "stale" and why."""
    dated = f" ({when})" if when else ""
    if commit.endswith("*") or commit in ("", "unknown"):
        known = [part for part in (commit.rstrip("*").replace("unknown", ""), when) if part]
        return "stale: commit not recorded" + (f" (file from {', '.join(known)})" if known else "")
    if commit.endswith("-dirty"):
        return f"stale: measured on {commit.removesuffix('-dirty')}{dated} with uncommitted code changes"
    changed = code_changed_since(commit)
    if changed is None:
        return f"stale: measured on {commit}{dated}, which this checkout lacks"
    if changed:
        return f"stale: measured on {commit}{dated}, code changed since"
    return f"{commit}, {when}" if when else commit


def report_rows(name: str, report: dict) -> list[dict]:
    """A result file's rows: by its module's current rules when it has them, else as the file holds them."""
    rebuild = getattr(importlib.import_module(BENCHMARKS[name][0]), "rows_from_report", None)
    if rebuild is not None and report.get("summary"):
        return rebuild(report)
    if report.get("summary"):
        return report["summary"]
    return validate_rows(report) if name == "validate" else learning_rows(report) if name.startswith("learning") else []


def summary_rows(sources: dict[str, Source | None]) -> list[dict]:
    """Every figure of every result file (with what it was measured on), in BENCHMARKS order."""
    rows = []
    for name, source in sources.items():
        if source is None:
            rows.append({**common.goal_row(name, "(not run)", None, "", None, "no result file"), "commit": ""})
            continue
        provenance = measured_on(source.commit, source.when)
        rows += [{**row, "commit": provenance} for row in report_rows(name, source.report)]
    return rows


def results_table(rows: list[dict]) -> str:
    return common.markdown_table(
        ["benchmark", "figure", "measured", "goal", "met", "measured on"],
        [
            [
                row["benchmark"],
                row["figure"],
                row["measured_text"].replace("|", "/"),
                row["goal"],
                MARK[row["met"]],
                row["commit"],
            ]
            for row in rows
        ],
    )


COMMIT_NOTE = (
    "`measured on`: the commit and the date the figures were measured on, when no code has changed since "
    "(results, Markdown, docs and tests aside); otherwise the row says stale and why, and `make bench` (the learning rows: "
    "`make bench-learning`) measures it again. A ratio is judged round by round: the median of the rounds' own "
    "ratios, their spread, and met only if the goal holds in every round."
)


def parameter_count(model_dir: Path) -> int:
    """The parameters of a saved model, from its safetensors header (no torch)."""
    with (model_dir / "model.safetensors").open("rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    return sum(math.prod(t["shape"]) for key, t in header.items() if key != "__metadata__")


def origin(sources: dict[str, Source | None]) -> str:
    """One sentence on where the figures come from, so that nobody reads them as GPU figures."""
    cores = sorted({s.report.get("machine", {}).get("cpus") for n, s in sources.items() if s and n != "gpu"} - {None})
    machine = f"{' or '.join(map(str, cores))}-core CPU" if cores else "CPU"
    return (
        f"Where these figures come from: a shared {machine} machine without a GPU"
        f"{' (the gpu rows aside)' if sources.get('gpu') else ''}, training models of a few million parameters "
        f"(the shipped warm start has {parameter_count(common.WARM_START) / 1e6:.1f}M), so they are no GPU "
        "figures: the ratios, taken side by side round by round, say more than the absolute times."
    )


def readme_block(rows: list[dict], where: str) -> str:
    """What the README holds between its results markers: ``where`` (``origin``), the table, how to read it."""
    return "\n".join(
        [
            TABLE_MARKERS[0],
            "",
            where,
            "",
            results_table(rows),
            "",
            f"{COMMIT_NOTE} Result files, learning curves and notes: [docs/benchmarks.md](docs/benchmarks.md).",
            "",
            TABLE_MARKERS[1],
        ]
    )


def replace_block(text: str, markers: tuple[str, str], block: str, where: Path) -> str:
    start, end = text.find(markers[0]), text.find(markers[1])
    if start < 0 or end < start:
        raise SystemExit(
            f"{where}: needs the lines {markers[0]} and {markers[1]} (in that order) around the "
            "generated part; put them back where it should go"
        )
    return text[:start] + block + text[end + len(markers[1]) :]


def kept_notes(page: Path) -> str:
    """The hand-written notes of the current page, markers included (empty ones for a new page)."""
    text = page.read_text() if page.exists() else ""
    start, end = text.find(NOTES_MARKERS[0]), text.find(NOTES_MARKERS[1])
    if start < 0 or end < start:
        return f"{NOTES_MARKERS[0]}\n{NOTES_MARKERS[1]}"
    return text[start : end + len(NOTES_MARKERS[1])]


def sources_table(sources: dict[str, Source | None]) -> str:
    def load(machine: dict) -> str:
        if "load_average_at_end" in machine:
            return f"at end {common.fmt((machine['load_average_at_end'] or [None])[0])}"
        return f"{common.fmt(machine.get('load_avg_1m'))} -> {common.fmt(machine.get('load_avg_1m_after'))}"

    return common.markdown_table(
        ["file", "commit", "date", "CPUs", "load average (1 min)"],
        [
            [
                f"`{shown(s.path)}`",
                s.commit,
                s.when or "n/a",
                common.fmt(s.report.get("machine", {}).get("cpus")),
                load(s.report.get("machine", {})),
            ]
            for s in sources.values()
            if s is not None
        ],
    )


LEARNING_TEXT = {
    "bird": (
        "Learning on the shipped BIRD sample",
        "validation execution accuracy (`val-core/bird/acc/mean@1`, greedy, the dev questions of "
        "`rlflow/assets/data/bird_sample`)",
        "[seed 1](learning_seed1.png)",
    ),
    "ranking": (
        "Learning the ranking task",
        "validation accuracy (the mean of `val-core/<source>/acc/mean@1` over its four sources, "
        "greedy, the questions of `rlflow/assets/data/ranking/val.parquet`)",
        "",
    ),
    "ranking_rm": (
        "Learning the ranking task from a reward model",
        "rule-scored validation accuracy (as for ranking above; the reward model scores training only, "
        "`pipelines/ranking_rm.yaml`)",
        "",
    ),
    "ranking_distill": (
        "Learning the ranking task from a teacher (on-policy distillation)",
        "the student's validation accuracy (as for ranking above; `pipelines/ranking_distill.yaml`, the teacher's "
        "greedy accuracy on the same split in its `warm_start.json`)",
        "",
    ),
    "bird_async": (
        "Learning on the BIRD sample with the rollout running ahead (`separate_async`)",
        "validation execution accuracy, as for BIRD above (`pipelines/bird_grpo_async.yaml`)",
        "[against wall time, beside sync seed 1](learning_async.png)",
    ),
    "bird_agent": (
        "Learning on the BIRD sample with a SQL tool (multi-turn)",
        "validation execution accuracy of the final answer, the validation rollouts running the agent loop too "
        "(`pipelines/bird_grpo_agent.yaml`)",
        "[single-turn against multi-turn over wall time](learning_agent.png)",
    ),
}


def learning_section(report: dict) -> list[str]:
    """The learning runs of one task: per seed, the table, the validation curve, the train reward."""
    runs = report.get("runs", [])
    if not runs:
        return []
    title, measured, picture = LEARNING_TEXT[report.get("task", "bird")]
    steps = sorted({int(k) for r in runs for k in r.get("val_acc_by_step", {})})
    curve = common.markdown_table(
        ["seed", *[str(s) for s in steps]],
        [[str(r["seed"]), *[_acc(r["val_acc_by_step"].get(str(s))) for s in steps]] for r in runs],
    )
    reward = [
        f"seed {r['seed']} {mean(r['train_score_by_step'][:5]):.2f} -> {mean(r['train_score_by_step'][-5:]):.2f}"
        for r in runs
        if len(r.get("train_score_by_step") or []) >= 10
    ]
    command = learning_command(report.get("task", "bird"), report.get("pipeline", ""))
    return [
        f"## {title}",
        "",
        f"`{command}` runs `rlflow run {report.get('pipeline')}` once per seed and reads the {measured} before "
        "training and at every `test_freq` step.",
        "",
        bench_learning.table(runs),
        "",
        *learning_errors(runs),
        "Validation accuracy by step:",
        "",
        curve,
        "",
        f"![validation accuracy by step, each seed with a band of one standard error]({curves_picture(report)})",
        "",
        *(
            [
                f"Training reward (`critic/score/mean`), mean of the first five steps -> mean of the last five: "
                f"{'; '.join(reward)}.",
                "",
            ]
            if reward
            else []
        ),
        *(
            [
                "Turns per trajectory (`num_turns/mean`, verl's count: 2 is an answer without a tool call), "
                "lowest and last step: "
                + "; ".join(
                    f"seed {r['seed']} {min(r['num_turns_mean_by_step']):.2f}, {r['num_turns_mean_by_step'][-1]:.2f}"
                    for r in runs
                    if r.get("num_turns_mean_by_step")
                )
                + ".",
                "",
            ]
            if any(r.get("num_turns_mean_by_step") for r in runs)
            else []
        ),
        *([f"`rlflow plot RUN_DIR -o curve.png` draws such a run: {picture}.", ""] if picture else []),
    ]


def _acc(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def learning_errors(runs: list[dict]) -> list[str]:
    """How the table's standard errors and its ``after`` are taken, when the result records them."""
    sizes = sorted({r["val_n"] for r in runs if "val_n" in r})
    if not sizes:
        return ["(Measured before the validation size was recorded: `after` is the last validation, no errors.)", ""]
    worst = 100 * bench_learning.standard_error(0.5, sizes[0])
    return [
        f"Each validation scores {' or '.join(map(str, sizes))} questions. `after` is the mean of the last "
        f"{bench_learning.LAST} validations, and the goal is judged on it against `before`. ± is one standard "
        f"error, the binomial sqrt(p(1-p)/n): at most {worst:.1f} points for any accuracy (see the notes).",
        "",
    ]


def curves_picture(report: dict) -> str:
    """Draw a learning result's validation curves (``bench_learning.picture``) beside the page (``draw_once``);
    the picture's file name."""
    task = report.get("task", "bird")
    recipe = learning_recipe(task, report.get("pipeline", ""))
    name = f"val_curves_{task}{'' if recipe == 'grpo' else f'_{recipe}'}.png"
    draw_once(bench_learning.picture, report, PAGE.with_name(name))
    return name


STEP_PICTURE = "step_time.png"


def step_section(source: Source | None) -> list[str]:
    """The step benchmark's section of docs/benchmarks.md: how it runs, and its picture."""
    if source is None:
        return []
    return [
        "## Step time: rlflow, the in-process loop and TRL (`step`)",
        "",
        "`python -m benchmarks.bench_step` runs the same GRPO step three ways, one after another in every round: "
        "`rlflow run` (Ray, its pools), the runtime's own step loop in one process without Ray, and TRL's "
        "`GRPOTrainer` in its own venv. A figure is the median step time after the first two steps; the bars are "
        "each arm's median over the rounds, the dots the rounds themselves (one colour per round, the same in "
        "every arm), so a round's ratio can be read off.",
        "",
        f"![step time of rlflow run, the in-process loop and TRL, round by round]({STEP_PICTURE})",
        "",
    ]


def draw_once(draw: Callable[[dict], Any], report: dict, path: Path) -> bool:
    """Save ``draw(report)`` (a matplotlib Figure) as the PNG ``path``, unless that PNG already shows this very
    report: a digest of the report is kept in it, and nothing else varies its bytes (no software version, no
    time). True when drawn."""
    digest = f"{path.name} sha256 " + hashlib.sha256(json.dumps(report, sort_keys=True).encode()).hexdigest()
    if path.exists():
        from PIL import Image

        with Image.open(path) as drawn:
            if drawn.text.get("Comment") == digest:
                return False
    draw(report).savefig(path, dpi=110, metadata={"Software": None, "Comment": digest})
    return True


def benchmarks_page(
    sources: dict[str, Source | None], rows: list[dict], notes: str, failed: list[str], where: str
) -> str:
    file_notes = [f"- `{s.path.name}`: {s.report['notes']}" for s in sources.values() if s and s.report.get("notes")]
    file_notes += [f"- {row['benchmark']}: {row['note']}" for row in rows if row.get("note")]
    learning = [s for name, s in sources.items() if name.startswith("learning") and s is not None]
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "<!-- generated by `python -m benchmarks.run_all --summary-only` from benchmarks/results/*.json; "
            "edit only between the notes markers -->",
            "",
            "Every figure here comes from a result file in `benchmarks/results/`, written by the benchmark named in its "
            "row. How to run them and how to read the figures (side by side, interleaved, medians): "
            "[benchmarks/README.md](../benchmarks/README.md).",
            "",
            "## Results",
            "",
            where,
            "",
            results_table(rows),
            "",
            COMMIT_NOTE,
            "",
            *(["Failed in the last run:", *failed, ""] if failed else []),
            "## Result files",
            "",
            sources_table(sources),
            "",
            *step_section(sources.get("step")),
            *(line for source in learning for line in learning_section(source.report)),
            *(["## Notes from the result files", "", *file_notes, ""] if file_notes else []),
            "## Notes",
            "",
            notes,
            "",
        ]
    )


def write_summary(quick: bool, outcomes: dict[str, dict]) -> Path:
    """Full results: the README's table and docs/benchmarks.md; ``--quick``: results/SUMMARY_quick.md."""
    sources = load_sources(quick)
    rows = summary_rows(sources)
    failed = [
        f"- {name}: exited with {o['exit_code']} (log: runs/bench-logs/{name}{'_quick' if quick else ''}.log)"
        for name, o in outcomes.items()
        if o.get("exit_code")
    ]
    if quick:
        path = common.RESULTS / "SUMMARY_quick.md"
        path.write_text(
            "\n".join(
                [
                    "# Benchmark summary (quick: smoke sizes, figures mean nothing)",
                    "",
                    "Reproduce: `python -m benchmarks.run_all --quick`.",
                    "",
                    results_table(rows),
                    "",
                    COMMIT_NOTE,
                    "",
                    *(["Failed in this run:", *failed, ""] if failed else []),
                ]
            )
        )
    else:
        where = origin(sources)
        README.write_text(replace_block(README.read_text(), TABLE_MARKERS, readme_block(rows, where), README))
        path = PAGE
        path.write_text(benchmarks_page(sources, rows, kept_notes(path), failed, where))
        print(f"wrote the results table of {shown(README)}")
        picture = PAGE.with_name(STEP_PICTURE)
        if sources.get("step") and draw_once(bench_step.picture, sources["step"].report, picture):
            print(f"drew {shown(picture)}")
    print(f"\n{results_table(rows)}\nwrote {shown(path)}")
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    names = selected(args)
    log_dir = common.ROOT / "runs" / "bench-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, dict] = {}
    if not args.summary_only:
        dirty = common.commit_id().endswith("-dirty")
        if dirty and not args.quick and not args.allow_dirty:
            print(
                "error: the tree has uncommitted code changes, so no row could say which code it measured; "
                "commit them first (or pass --allow-dirty: the rows then say they were measured on a dirty tree)",
                file=sys.stderr,
            )
            return 2
        trl_setup = any(n in NEEDS_TRL for n in names) and not args.no_setup
        if not args.quick:
            print(estimate(names, trl_setup and not common.TRL_PYTHON.exists()), flush=True)
        if trl_setup:
            print(f"TRL venv: {ensure_trl(log_dir)}", flush=True)
        for name in names:
            outcomes[name] = run_one(name, args.quick, log_dir)
            if not args.quick and outcomes[name]["exit_code"] == 0:
                record_duration(name, outcomes[name]["minutes"])
    write_summary(args.quick, outcomes)
    return 1 if any(o["exit_code"] for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
