"""Helpers shared by the CLI tests (imported by name: ``from cli_helpers import ...``): the real CLI in a
subprocess, and the command line of one short training run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The ranking task (short prompts) in bfloat16, two steps with a checkpoint each, no validation, the
# reference stage dropped from the command line, TensorBoard chosen for this run: small enough for a 2-core CPU.
SHORT_RUN = (
    "pipelines/ranking_grpo.yaml",
    "--sink",
    "tensorboard",
    "--drop",
    "ref_log_prob",
    *(
        arg
        for setting in (
            "algorithm.use_kl_loss=false",
            "model.dtype=bfloat16",
            "trainer.train_batch_size=2",
            "trainer.ppo_mini_batch_size=2",
            "trainer.ppo_micro_batch_size_per_gpu=4",
            "algorithm.n=2",
            "data.max_response_length=8",
            "trainer.total_steps=2",
            "trainer.save_freq=1",
            "trainer.test_freq=0",
            "trainer.val_before_train=false",
        )
        for arg in ("--set", setting)
    ),
)


def rlflow(*args: str, cwd: Path = REPO, timeout: float = 600) -> subprocess.CompletedProcess:
    """``rlflow ARGS`` in a fresh interpreter, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rlflow.cli.main", *args],
        cwd=cwd,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
