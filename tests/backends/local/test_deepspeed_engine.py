"""The DeepSpeed training engine and the engine factory.

The factory tests are pure. ``test_two_workers_zero2_and_zero3_match_torch`` is the CI test
of the DeepSpeed engine: two worker processes form a gloo group from the runtime-style
``dist={master_addr, master_port}``, train through ``create_local_engine`` with ZeRO-2 and
then ZeRO-3, and each must follow the single-worker torch engine's loss trajectory on the
same data over three updates (same mini-batch composition; sums over ranks change only float
rounding), then replay the last update from a DeepSpeed checkpoint exactly. It needs the
deepspeed extra and no compiler (the engine skips DeepSpeed's CPU shared-memory op).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlflow.backends.local import factory
from rlflow.check.engines import engine_choice
from rlflow.errors import BackendError

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import deepspeed_worker  # noqa: E402  (helper script beside this test)
from local_helpers import without_readings  # noqa: E402

# Relative tolerance on losses and gradient norms, absolute on the weight fingerprint (a sum
# over ~4 M weights of about 2e3): ZeRO-2 sums gradients over ranks in another order, so
# only float rounding may differ.
RTOL = 1e-4
FINGERPRINT_RTOL = 1e-5


# ---- factory (pure) ------------------------------------------------------------------------
def test_missing_extra_names_the_extra(monkeypatch):
    assert factory.missing_extra("torch") is None
    assert factory.missing_extra("hf") is None
    monkeypatch.setattr(factory.importlib.util, "find_spec", lambda name: None)
    assert (
        factory.missing_extra("deepspeed")
        == "engine 'deepspeed' needs the deepspeed extra: pip install 'rlflow[deepspeed]'"
    )
    assert factory.missing_extra("vllm") == "engine 'vllm' needs the vllm extra: pip install 'rlflow[vllm]'"
    with pytest.raises(BackendError, match=r"generate.with.engine: engine 'vllm' needs the vllm extra"):
        factory.require("vllm", "generate.with.engine")


def test_missing_extra_imports_nothing():
    code = (
        "import sys, rlflow.backends.local.factory as e; e.missing_extra('deepspeed'); e.missing_extra('vllm'); "
        "print(sorted(m for m in ('torch', 'deepspeed', 'vllm', 'verl', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_engine_choice_reads_the_stages():
    choice = engine_choice(deepspeed_worker.make_pipeline("deepspeed", 3))
    assert (choice.training, choice.zero_stage, choice.log_prob, choice.rollout) == (
        "deepspeed",
        3,
        "deepspeed",
        "torch",
    )
    assert not choice.default
    assert engine_choice(deepspeed_worker.make_pipeline("torch", 0)).default


def test_log_prob_on_deepspeed_needs_update_on_deepspeed():
    pipeline = deepspeed_worker.make_pipeline("torch", 0)
    stages = [s.model_dump(by_alias=True) for s in pipeline.stages]
    stages[1]["with"] = {"engine": "deepspeed"}
    broken = pipeline.model_validate({**pipeline.model_dump(by_alias=True), "stages": stages})
    assert "old_log_prob runs on deepspeed but update_actor on torch" in engine_choice(broken).problem()
    with pytest.raises(BackendError, match="old_log_prob runs on deepspeed but update_actor on torch"):
        factory.create_local_engine(broken, engine_choice(broken))


def test_ds_config_follows_the_pipeline():
    from rlflow.backends.local.deepspeed_actor import ds_config

    pipeline = deepspeed_worker.make_pipeline("deepspeed", 2)
    cfg = ds_config(pipeline, world_size=2, zero_stage=2, num_params=1000)
    # mini-batch 2 prompts x n=2 = 4 rows over 2 ranks: 2 rows each, micro-batches of 1
    assert cfg["train_micro_batch_size_per_gpu"] == 1 and cfg["gradient_accumulation_steps"] == 2
    assert cfg["gradient_clipping"] == pipeline.trainer.grad_clip
    assert cfg["zero_optimization"]["stage"] == 2 and cfg["zero_optimization"]["reduce_bucket_size"] == 1000
    assert not cfg["bf16"]["enabled"] and not cfg["fp16"]["enabled"]


# ---- the engine, for real ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_ranks(tmp_path: Path, world: int, *args: str) -> list[dict]:
    port = str(_free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(HERE / "deepspeed_worker.py"),
                str(tmp_path / f"rank{r}.json"),
                "--rank",
                str(r),
                "--world",
                str(world),
                "--port",
                port,
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=300)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, log in zip(procs, logs):
        assert proc.returncode == 0, log[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]


@pytest.mark.slow
def test_two_workers_zero2_and_zero3_match_torch(tmp_path):
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed: pip install 'rlflow[deepspeed]'")
    reference = deepspeed_worker.run("torch", [0], rank=0, world=1, port=None, steps=3, checkpoint=None, reorder_for=2)[
        "0"
    ]
    losses = [s["actor/pg_loss"] for s in reference["steps"]]
    assert max(losses) - min(losses) > 1e-3  # the loss moves, so agreement is not agreement on a constant
    ranks = _run_ranks(
        tmp_path,
        2,
        "--engine",
        "deepspeed",
        "--zero-stages",
        "2,3",
        "--steps",
        "3",
        "--checkpoint",
        str(tmp_path / "ckpt"),
    )
    for stage in ("2", "3"):
        _check_against_reference(reference, [r[stage] for r in ranks], stage)
        ckpt = tmp_path / "ckpt" / f"zero{stage}"
        assert (ckpt / "deepspeed" / "latest").read_text().strip() == "global_step2"
        assert (ckpt / "rank_1" / "model" / "model.safetensors").exists()


def _check_against_reference(reference: dict, ranks: list[dict], stage: str) -> None:
    for step, (want, got) in enumerate(zip(reference["steps"], ranks[0]["steps"]), start=1):
        for name in ("actor/pg_loss", "actor/loss", "actor/ppo_kl", "actor/grad_norm", "actor/pg_clipfrac"):
            assert got[name] == pytest.approx(want[name], rel=RTOL, abs=1e-6), (
                stage,
                step,
                name,
                got[name],
                want[name],
            )
    assert ranks[0]["steps"] == ranks[1]["steps"]  # metrics are reduced over the group
    assert ranks[0]["fingerprint"] == ranks[1]["fingerprint"]  # replicas stay identical
    assert ranks[0]["fingerprint"] == pytest.approx(reference["fingerprint"], rel=FINGERPRINT_RTOL)
    assert ranks[0]["fingerprint"] != ranks[0]["initial_fingerprint"]  # the weights did change
    # DeepSpeed checkpoint written before update 3, loaded, update 3 again: the same update, bit for bit
    for rank in ranks:
        assert without_readings(rank["replayed"]) == without_readings(rank["steps"][-1])
        assert rank["replayed_fingerprint"] == rank["fingerprint"]
