"""Run every benchmark, then write benchmarks/results/SUMMARY.md (figure, goal, met or not).

    python benchmarks/run_all.py                      # everything (what `make bench` runs)
    python benchmarks/run_all.py --quick              # every benchmark at smoke sizes (minutes)
    python benchmarks/run_all.py --only step startup  # some of them
    python benchmarks/run_all.py --skip learning
    python benchmarks/run_all.py --summary-only       # rewrite SUMMARY.md from the JSON already there

Each benchmark runs as its own process, one after another (never two at once: they would
measure each other), with its output both shown and kept in runs/bench-logs/<name>.log. A
benchmark that fails is reported in the summary and the others still run. TRL runs in its own
venv: when ``.venv-trl`` is missing it is created first with scripts/setup_trl_venv.sh
(``--no-setup`` skips that; the TRL comparisons then say "not installed").

The summary is written from whatever result files exist, so figures of a benchmark run
separately (or by another command, such as bench_learning.py) appear in it as well; every row
names the JSON file it comes from. ``--quick`` results go to ``*_quick.json`` and
``SUMMARY_quick.md``, never over the real ones.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

# name -> (script, extra arguments for a full run, extra arguments for --quick)
BENCHMARKS: dict[str, tuple[str, list[str], list[str]]] = {
    "validate": ("bench_validate.py", [], ["--runs", "3", "--verl-runs", "1",
                                           "--output", str(common.RESULTS / "validate_quick.json")]),
    "compile": ("bench_compile.py", [], ["--quick"]),
    "reward": ("bench_reward.py", [], ["--quick"]),
    "generation": ("bench_generation.py", [], ["--quick"]),
    "step": ("bench_step.py", [], ["--quick"]),
    "forwarder": ("bench_forwarder.py", [], ["--quick"]),
    "startup": ("bench_startup.py", [], ["--quick"]),
    "learning": ("bench_learning.py", [], ["--quick"]),
}
NEEDS_TRL = ("step", "startup")
VALIDATE_WALL_GOAL_S, VALIDATE_SPEEDUP_GOAL = 0.3, 20.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke sizes; results to *_quick.json and SUMMARY_quick.md")
    p.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these")
    p.add_argument("--skip", nargs="+", choices=list(BENCHMARKS), default=[], help="leave these out")
    p.add_argument("--no-setup", action="store_true", help="do not create .venv-trl when it is missing")
    p.add_argument("--summary-only", action="store_true", help="only rewrite the summary from existing results")
    return p.parse_args(argv)


def ensure_trl(log_dir: Path) -> str:
    if common.TRL_PYTHON.exists():
        return "present"
    print("creating .venv-trl (scripts/setup_trl_venv.sh) ...", flush=True)
    with (log_dir / "setup_trl.log").open("w") as log:
        done = subprocess.run(["bash", str(common.ROOT / "scripts" / "setup_trl_venv.sh")], cwd=common.ROOT, stdout=log,
                              stderr=subprocess.STDOUT)
    return "created" if done.returncode == 0 else f"setup failed (see {log_dir / 'setup_trl.log'})"


def run_one(name: str, quick: bool, log_dir: Path) -> dict:
    script, full, smoke = BENCHMARKS[name]
    cmd = [sys.executable, str(common.BENCH / script), *(smoke if quick else full)]
    print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    with (log_dir / f"{name}{'_quick' if quick else ''}.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=common.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"})
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
        code = proc.wait()
    minutes = (time.perf_counter() - start) / 60
    print(f"=== {name}: exit {code} after {minutes:.1f} min", flush=True)
    return {"exit_code": code, "minutes": round(minutes, 2)}


# ---- the summary ------------------------------------------------------------------------------
def validate_rows(report: dict) -> list[dict]:
    """bench_validate.py's figures as summary rows (its JSON predates the summary convention)."""
    rl = report.get("rlflow_validate", {})
    wall, cpu = rl.get("wall_median_s"), rl.get("cpu_median_s")
    rows = [common.goal_row("validate", "rlflow validate, cold process (wall median)", wall, f"< {VALIDATE_WALL_GOAL_S} s",
                            None if wall is None else wall < VALIDATE_WALL_GOAL_S,
                            f"{common.fmt(wall)} s (CPU {common.fmt(cpu)} s; heavy modules: "
                            f"{', '.join(rl.get('heavy_modules_imported') or []) or 'none'})")]
    speedup = report.get("speedup_wall_median")
    verl = report.get("verl_config_error", {}).get("wall_median_s")
    rows.append(common.goal_row("validate", "config error: rlflow validate vs verl (wall)", speedup,
                                f">= {VALIDATE_SPEEDUP_GOAL:g}x faster", None if speedup is None else speedup >= VALIDATE_SPEEDUP_GOAL,
                                None if speedup is None else f"{speedup:g}x ({common.fmt(wall)} s vs verl {common.fmt(verl)} s)"))
    return rows


def learning_rows(report: dict) -> list[dict]:
    runs = report.get("runs", [])
    goal = report.get("goal", {})
    shown = "; ".join(f"seed {r['seed']}: {r['before']:.2f} -> {r['after']:.2f} in {r['wall_minutes']:.0f} min" for r in runs)
    return [common.goal_row("learning", "validation exec accuracy rise, every seed", None,
                            f"+{100 * goal.get('min_delta', 0):.0f} points within {goal.get('max_minutes', 0):g} min",
                            report.get("passed"), shown or "n/a")]


def summary_rows(quick: bool) -> list[tuple[str, dict]]:
    suffix = "_quick" if quick else ""
    rows = []
    for name in BENCHMARKS:
        path = common.RESULTS / f"{name}{suffix}.json"
        if not path.exists():
            rows.append((path.name, common.goal_row(name, "(not run)", None, "", None, "no result file")))
            continue
        report = json.loads(path.read_text())
        found = report.get("summary") or (validate_rows(report) if name == "validate" else
                                          learning_rows(report) if name == "learning" else [])
        rows += [(path.name, row) for row in found]
    return rows


def write_summary(quick: bool, outcomes: dict[str, dict]) -> Path:
    rows = summary_rows(quick)
    mark = {True: "yes", False: "**no**", None: "n/a"}
    table = common.markdown_table(
        ["benchmark", "figure", "measured", "goal", "met"],
        [[row["benchmark"], row["figure"], row["measured_text"].replace("|", "/"), row["goal"], mark[row["met"]]]
         for _, row in rows])
    notes = [f"- {row['benchmark']}: {row['note']}" for _, row in rows if row.get("note")]
    failed = [f"- {name}: exited with {o['exit_code']} (log: runs/bench-logs/{name}.log)" for name, o in outcomes.items()
              if o.get("exit_code")]
    machine = common.machine()
    text = "\n".join([
        f"# Benchmark summary{' (quick: smoke sizes, figures mean nothing)' if quick else ''}", "",
        f"Reproduce: `python benchmarks/run_all.py{' --quick' if quick else ''}` (or `make bench`). "
        f"Written {time.strftime('%Y-%m-%d %H:%M')} on {machine['cpus']} CPUs, load average {machine['load_avg_1m']} "
        "(a shared machine: ratios measured side by side in one run, medians of interleaved repetitions).",
        "", table, "",
        *(["Notes:", *notes, ""] if notes else []),
        *(["Failed in this run:", *failed, ""] if failed else []),
        "Sources: " + ", ".join(sorted({f"`results/{src}`" for src, _ in rows if not src.startswith("(")})), "",
    ])
    path = common.RESULTS / f"SUMMARY{'_quick' if quick else ''}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"\n{text}\nwrote {path}")
    return path


def main(argv=None) -> int:
    args = parse_args(argv)
    names = [n for n in (args.only or BENCHMARKS) if n not in args.skip]
    log_dir = common.ROOT / "runs" / "bench-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    outcomes: dict[str, dict] = {}
    if not args.summary_only:
        if any(n in NEEDS_TRL for n in names) and not args.no_setup:
            print(f"TRL venv: {ensure_trl(log_dir)}", flush=True)
        for name in names:
            outcomes[name] = run_one(name, args.quick, log_dir)
    write_summary(args.quick, outcomes)
    return 1 if any(o["exit_code"] for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
