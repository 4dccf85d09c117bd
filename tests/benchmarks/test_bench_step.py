"""bench_step's in-process loop arm runs, at ``--quick`` sizes, as ``python -m benchmarks.bench_step`` runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks import common


def test_the_loop_arm_times_every_step(tmp_path):
    out = tmp_path / "step_quick.json"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_step", "--quick", "--arms", "loop", "--steps", "2", "--out", str(out)],
        cwd=common.ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    loop = report["arms"]["loop"]
    assert not loop["errors"] and loop["samples"] == 2  # 2 steps, none skipped as warm-up at this size
    assert loop["step_s_median"] > 0 and {"gen", "update_actor"} <= set(loop["stage_s_median"])
