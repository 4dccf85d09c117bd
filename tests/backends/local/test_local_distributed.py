"""Data parallelism on the CPU: two gloo ranks, each on its shard, equal one rank on the whole batch."""

from __future__ import annotations

import json
import socket

import pytest
import torch
import torch.multiprocessing as mp
from local_helpers import make_pipeline

from rlflow.batch import Batch

# One mini-batch (4 prompts x n=2): with more, ranks would form different mini-batches than one
# process does (as in verl), and the comparison with a single process would not hold.
TRAINER = {"train_batch_size": 4, "ppo_mini_batch_size": 4, "optim": {"name": "sgd", "lr": 0.5}}


def _rank(rank: int, port: int, folder: str) -> None:
    from rlflow.backends.local.local_engine import LocalEngine

    torch.set_num_threads(1)
    batch = Batch(torch.load(f"{folder}/batch.pt"))
    engine = LocalEngine(
        make_pipeline(trainer=TRAINER),
        rank=rank,
        world_size=2,
        roles=frozenset({"actor"}),
        dist={"master_addr": "127.0.0.1", "master_port": port},
    )
    try:
        metrics = engine.update_actor(batch.split(2)[rank], {})
        torch.save(engine.model.state_dict(), f"{folder}/rank_{rank}.pt")
        with open(f"{folder}/rank_{rank}.json", "w") as f:
            json.dump(metrics, f)
    finally:
        engine.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # two spawned processes each import torch, transformers and verl
def test_two_ranks_stay_identical_and_match_one_rank(tmp_path):
    from rlflow.backends.local.local_engine import LocalEngine
    from rlflow.backends.local.models import build_prompt_batch

    single = LocalEngine(make_pipeline(trainer=TRAINER))
    batch = build_prompt_batch(single.tokenizer, ["How many?", "SELECT", "List all shops.", "Which city?"], 32)
    batch = batch.repeat_interleave(2)
    batch.update(single.generate(batch, {"max_response_length": 8, "seed": 1}))
    batch.update(single.compute_log_prob(batch, {}))
    gen = torch.Generator().manual_seed(0)
    batch["advantages"] = (
        torch.randn(len(batch), 1, generator=gen).expand_as(batch["old_log_probs"]) * batch["response_mask"]
    )
    tensors = batch.select(("prompts", "prompt_mask", "responses", "response_mask", "old_log_probs", "advantages"))
    torch.save(tensors.tensors, tmp_path / "batch.pt")

    mp.start_processes(_rank, args=(_free_port(), str(tmp_path)), nprocs=2, join=True, start_method="spawn")

    expected = single.update_actor(tensors, {})
    rank0, rank1 = (torch.load(tmp_path / f"rank_{r}.pt") for r in (0, 1))
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)
    for key, value in single.model.state_dict().items():
        assert torch.allclose(rank0[key], value, atol=1e-6), key
    metrics = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1)]
    assert metrics[0] == metrics[1]
    for name in ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl"):
        assert abs(metrics[0][name] - expected[name]) < 1e-5, name
