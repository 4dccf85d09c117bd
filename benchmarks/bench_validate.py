"""How fast does a user hear about a config mistake? ``rlflow validate`` next to verl.

Measures, each in a fresh process (cold, as a user runs it):
- ``rlflow validate PIPELINE``: wall time and CPU time over N runs (median, min), and which
  heavy modules (torch, ray, verl, transformers, vllm, deepspeed) the command imported;
- ``python -m verl.trainer.main_ppo data.train_batch_size=-1``: verl reporting one config
  error (a batch size it rejects in ``validate_config``, before any Ray or GPU work).

``rlflow validate`` is timed twice: with Python's bytecode cache as any installed package has
it (kept in a temporary PYTHONPYCACHEPREFIX, warmed by one untimed run, so nothing is written
into the source tree), and with PYTHONDONTWRITEBYTECODE=1 as a development checkout may set
it (libraries still load their cached bytecode; rlflow's own modules, never cached, are
compiled from source on every run).

Prints a table and writes benchmarks/results/validate.json. CPU time is reported beside
wall time because on a shared machine wall time mostly measures the neighbours. Without verl
installed its arm is skipped, and the result says why.

    python -m benchmarks.bench_validate [--runs 10] [--verl-runs 3] [--skip-verl]
    python -m benchmarks.bench_validate --quick    # 1 run of each: proves the path
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

REPO = common.ROOT
HEAVY = ("torch", "ray", "verl", "transformers", "vllm", "deepspeed")
VERL_ARGS = ["-m", "verl.trainer.main_ppo", "data.train_batch_size=-1"]
PROBE = """
import sys
sys.argv = ["rlflow", "validate", {pipeline!r}]
from rlflow.cli.main import main
try:
    main()
except SystemExit:
    pass
print(len(sys.modules), " ".join(sorted({{m.split(".")[0] for m in sys.modules}} & {heavy!r})), file=sys.stderr)
"""


def timed(cmd: list[str], cwd: Path, runs: int, **env_vars: str) -> dict:
    """Wall and CPU seconds of ``cmd`` over ``runs`` fresh processes, plus its last run's outcome."""
    walls, cpus, result = [], [], None
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HYDRA_FULL_ERROR": "0", **env_vars}
    env = {k: v for k, v in env.items() if v != ""}  # "" removes a variable
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env, timeout=600)
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    output = (result.stderr or result.stdout).strip().splitlines()
    errors = [line for line in output if "Error" in line]  # the error itself, not the closing hint
    return {
        "command": " ".join(cmd),
        "runs": runs,
        "exit_code": result.returncode,
        "wall_s": [round(w, 4) for w in walls],
        "wall_median_s": round(statistics.median(walls), 4),
        "wall_min_s": round(min(walls), 4),
        "cpu_median_s": round(statistics.median(cpus), 4),
        "cpu_min_s": round(min(cpus), 4),
        "message": (errors or output or [""])[-1],
    }


def rlflow_command(pipeline: str) -> list[str]:
    """The installed ``rlflow`` script when there is one (what users run), else ``python -m``."""
    script = shutil.which("rlflow", path=str(Path(sys.executable).parent))
    return [script, "validate", pipeline] if script else [sys.executable, "-m", "rlflow.cli.main", "validate", pipeline]


def imported_modules(pipeline: str) -> tuple[int, list[str]]:
    probe = PROBE.format(pipeline=pipeline, heavy=set(HEAVY))
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    count, _, heavy = result.stderr.strip().splitlines()[-1].partition(" ")  # "<modules> <heavy ones>"
    return int(count), heavy.split()


def table(rows: list[tuple[str, dict]]) -> str:
    lines = [f"{'command':<58} {'exit':>4} {'wall median':>11} {'wall min':>9} {'cpu median':>10}"]
    for name, r in rows:
        lines.append(
            f"{name:<58} {r['exit_code']:>4} {r['wall_median_s']:>10.3f}s {r['wall_min_s']:>8.3f}s "
            f"{r['cpu_median_s']:>9.3f}s"
        )
    return "\n".join(lines)


def verl_missing() -> str | None:
    """Why the verl arm cannot run here, or None when it can."""
    if importlib.util.find_spec("verl") is None:
        return "verl is not installed (pip install 'rlflow[train]' brings it)"
    return None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(parser)
    parser.add_argument("--pipeline", default="pipelines/bird_grpo.yaml")
    parser.add_argument("--runs", type=int, default=None, help="timed rlflow runs (default 10; --quick: 1)")
    parser.add_argument("--verl-runs", type=int, default=None, help="timed verl runs (default 3; --quick: 1)")
    parser.add_argument("--skip-verl", action="store_true")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    runs = args.runs or (1 if args.quick else 10)
    verl_runs = args.verl_runs or (1 if args.quick else 3)
    command = rlflow_command(args.pipeline)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as cache:
        timed(command, REPO, 1, PYTHONPYCACHEPREFIX=cache, PYTHONDONTWRITEBYTECODE="")  # fills the cache
        rlflow = timed(command, REPO, runs, PYTHONPYCACHEPREFIX=cache, PYTHONDONTWRITEBYTECODE="")
    uncached = timed(command, REPO, runs, PYTHONPYCACHEPREFIX="", PYTHONDONTWRITEBYTECODE="1")
    count, heavy = imported_modules(args.pipeline)
    rlflow.update(modules_imported=count, heavy_modules_imported=heavy)
    rows = [(f"rlflow validate {args.pipeline}", rlflow), ("  same, PYTHONDONTWRITEBYTECODE=1", uncached)]
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg_1m": load_before},
        "rlflow_validate": rlflow,
        "rlflow_validate_dont_write_bytecode": uncached,
    }
    missing = None if args.skip_verl else verl_missing()
    if missing:
        report["verl_config_error"] = {"skipped": missing}
    elif not args.skip_verl:
        with tempfile.TemporaryDirectory() as scratch:  # Hydra writes outputs/ into the working directory
            verl = timed([sys.executable, *VERL_ARGS], Path(scratch), verl_runs)
        report["verl_config_error"] = verl
        report["speedup_wall_median"] = round(verl["wall_median_s"] / rlflow["wall_median_s"], 1)
        rows.append(("python " + " ".join(VERL_ARGS), verl))
    report["machine"]["load_avg_1m_after"] = os.getloadavg()[0]

    print(table(rows))
    print(f"\nrlflow validate: {count} modules imported; heavy ones: {', '.join(heavy) or 'none'}")
    if missing:
        print(f"verl: skipped, {missing}")
    elif "verl_config_error" in report:
        print(f"verl's answer: {report['verl_config_error']['message']}")
        print(f"rlflow answers {report['speedup_wall_median']}x sooner (wall, median)")
    print(
        f"load average (1 min) before/after: {report['machine']['load_avg_1m']:.2f} / "
        f"{report['machine']['load_avg_1m_after']:.2f}"
    )
    common.write_result("validate", report, args.quick, args.out)


if __name__ == "__main__":
    main()
