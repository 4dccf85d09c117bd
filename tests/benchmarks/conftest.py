"""``run_bench``: a benchmark run as a user runs it (``python -m benchmarks.bench_x --quick``, from the repository root)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from benchmarks import common


@pytest.fixture(scope="module")
def run_bench(tmp_path_factory):
    """``run_bench(name, *flags)`` runs ``benchmarks.bench_<name> --quick --out <tmp>/<name>.json`` in a
    subprocess, checks that it exited 0 and returns (the finished process, the JSON result). Module-scoped,
    so that a module's fixture can run its benchmark once for all its tests."""
    folder = tmp_path_factory.mktemp("bench")

    def run(name: str, *flags: str) -> tuple[subprocess.CompletedProcess, dict]:
        out = folder / f"{name}.json"
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
        done = subprocess.run(
            [sys.executable, "-m", f"benchmarks.bench_{name}", "--quick", "--out", str(out), *flags],
            cwd=common.ROOT,
            capture_output=True,
            text=True,
            timeout=600,  # a hang guard; each of these takes well under that
            env=env,
        )
        assert done.returncode == 0, f"bench_{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        report = json.loads(out.read_text())
        assert report["benchmark"] == name and report["quick"] is True
        return done, report

    return run
