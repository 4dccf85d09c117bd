"""One rank of the DeepSpeed-vs-torch comparison, run as a script (the test starts it in subprocesses).

``python deepspeed_worker.py OUT.json --engine deepspeed --zero-stages 2,3 --rank R --world 2 --port P``
builds the local engine through ``create_local_engine`` for each ZeRO stage in turn (one
process group), runs ``--steps`` updates on a fixed batch (fresh old log-probs before each,
as a GRPO step does) and writes, per stage, the metrics of each update, its seconds and a
weight fingerprint to ``OUT.json``. With ``--checkpoint DIR`` it saves before the last update,
then reloads and repeats that update, recording both.

A script rather than a spawned test function so the child imports nothing from pytest's
import machinery; ``if __name__ == "__main__"`` because torch.distributed children must not
re-run the parent's module body.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from rlflow.batch import Batch
from rlflow.schemas.pipeline import Pipeline

PROMPTS = ["How many singers are there?", "List the names of all shops in Boston.", "SELECT", "Count the rows."]
N, RESPONSE = 2, 8
MINI_PROMPTS = 2  # two mini-batches per update: the second sees a ratio != 1, so the clip path runs


def make_pipeline(engine: str, zero_stage: int) -> Pipeline:
    update = {"engine": engine, "zero_stage": zero_stage} if engine == "deepspeed" else {}
    return Pipeline.model_validate(
        {
            "name": "ds-compare",
            "data": {"train": "train.json", "max_prompt_length": 32, "max_response_length": RESPONSE},
            "algorithm": {"n": N},
            "trainer": {
                "train_batch_size": len(PROMPTS),
                "ppo_mini_batch_size": MINI_PROMPTS,
                "ppo_micro_batch_size_per_gpu": 1,
                "seed": 5,
                "optim": {"lr": 1e-3},
            },
            "resources": {"pool": {"type": "local", "device": "cpu"}},
            "stages": [
                {"name": "generate", "uses": "generate", "on": "pool"},
                {"name": "old_log_prob", "uses": "old_log_prob", "on": "pool", "with": {"engine": engine}},
                {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
                {"name": "update_actor", "uses": "update_actor", "on": "pool", "with": update},
                {"name": "sync_weights", "uses": "sync_weights", "on": "pool"},
            ],
        }
    )


def make_batch(tokenizer) -> Batch:
    """Prompts x n rows with seeded random responses (lengths vary) and advantages."""
    from rlflow.backends.local.models import build_prompt_batch

    batch = build_prompt_batch(tokenizer, PROMPTS, 32).repeat_interleave(N)
    gen = torch.Generator().manual_seed(11)
    rows = len(batch)
    batch["responses"] = torch.randint(5, len(tokenizer), (rows, RESPONSE), generator=gen)
    lengths = torch.randint(2, RESPONSE + 1, (rows,), generator=gen)
    batch["response_mask"] = (torch.arange(RESPONSE)[None, :] < lengths[:, None]).long()
    batch["advantages"] = (
        torch.randn(rows, 1, generator=gen).expand(rows, RESPONSE).contiguous() * batch["response_mask"]
    )
    return batch


def data_parallel_order(batch: Batch, world: int) -> Batch:
    """``batch`` reordered so one worker's mini-batches hold the rows ``world`` workers' mini-batches hold."""
    num_mini = math.ceil(len(batch) / (MINI_PROMPTS * N))
    minis = [shard.split(num_mini) for shard in batch.split(world)]
    return Batch.concat([minis[r][m] for m in range(num_mini) for r in range(world)])


def one_update(engine, shard: Batch, step: int) -> tuple[dict, float]:
    shard.update(
        engine.compute_log_prob(
            shard.select(("prompts", "prompt_mask", "responses", "response_mask")), {"temperature": 1.0}
        )
    )
    start = time.perf_counter()
    metrics = engine.update_actor(shard, {"temperature": 1.0, "global_steps": step})
    seconds = time.perf_counter() - start
    engine.update_weights(step)  # as sync_weights does after every update: the rollout's model follows
    return metrics, seconds


def fingerprint(engine) -> list[float]:
    """Sum and sum of squares of all weights (float64): equal weights, equal fingerprints."""
    flat = torch.cat([p.detach().double().reshape(-1) for p in engine.model.parameters()])
    return [float(flat.sum()), float((flat * flat).sum())]


def train(engine, rank: int, world: int, steps: int, checkpoint: str | None, reorder_for: int) -> dict:
    """``steps`` updates on this rank's shard; with ``checkpoint``, save before the last and replay it."""
    batch = make_batch(engine.tokenizer)
    shard = data_parallel_order(batch, reorder_for).split(world)[rank]
    out = {"initial_fingerprint": fingerprint(engine), "steps": [], "seconds": []}
    for step in range(1, steps + 1):
        if checkpoint and step == steps:
            engine.save_checkpoint(checkpoint, step - 1)
        metrics, seconds = one_update(engine, shard, step)
        out["steps"].append(metrics)
        out["seconds"].append(seconds)
    out["fingerprint"] = fingerprint(engine)
    if checkpoint:
        engine.load_checkpoint(checkpoint)
        out["replayed"], _ = one_update(engine, shard, steps)
        out["replayed_fingerprint"] = fingerprint(engine)
    return out


def run(
    engine_name: str,
    zero_stages: list[int],
    rank: int,
    world: int,
    port: int | None,
    steps: int,
    checkpoint: str | None,
    reorder_for: int = 1,
) -> dict[str, dict]:
    """One engine per ZeRO stage in turn, in one process group; results keyed by stage."""
    from rlflow.backends.local.factory import create_local_engine
    from rlflow.check.engines import engine_choice

    torch.set_num_threads(1)
    dist = {"master_addr": "127.0.0.1", "master_port": port} if world > 1 else None
    engines, results = [], {}
    try:
        for stage in zero_stages:
            start = time.perf_counter()
            pipeline = make_pipeline(engine_name, stage)
            engines.append(
                create_local_engine(
                    pipeline, engine_choice(pipeline), device="cpu", rank=rank, world_size=world, dist=dist
                )
            )
            setup = time.perf_counter() - start
            where = f"{checkpoint}/zero{stage}" if checkpoint else None
            results[str(stage)] = {"setup_seconds": setup, **train(engines[-1], rank, world, steps, where, reorder_for)}
    finally:
        for engine in reversed(engines):  # the process group goes with the last close
            engine.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--engine", default="deepspeed")
    parser.add_argument("--zero-stages", default="2", help="comma-separated, e.g. 2,3")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--port", type=int)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--checkpoint")
    parser.add_argument("--reorder-for", type=int, default=1)
    args = parser.parse_args()
    result = run(
        args.engine,
        [int(z) for z in args.zero_stages.split(",")],
        args.rank,
        args.world,
        args.port,
        args.steps,
        args.checkpoint,
        args.reorder_for,
    )
    with open(args.out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
