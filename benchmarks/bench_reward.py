"""SQL reward throughput: rewards per second with a reward pool of 1 and of 2 CPU workers.

    python -m benchmarks.bench_reward            # every sample question x 8 responses per call, 5 reps per pool
    python -m benchmarks.bench_reward --quick    # 4 questions x 8 responses, 1 rep

The pools are rlflow's own: both are started with the runtime's ``start_pools`` from the
bird_grpo pipeline (``reward_pool`` with ``workers: 1`` and ``workers: 2``, Ray actors of one
CPU each) and called through the runtime's ``RayExecutor``, so a call is what a training step
pays: shard the batch, ship it, score on the workers, gather. Both pools live side by side and
calls alternate between them.

The responses are a realistic mix for every question of the shipped BIRD sample, 8 per
question as a GRPO group: 2 with the gold SQL (correct), 3 that run but answer otherwise
(the gold query cut to another page of rows), 2 that SQLite rejects (a misspelt keyword, a
missing table), 1 with no SQL at all. The measured exec/format/error rates are reported.

Gold results and connections are cached per worker across steps (as in training), so the
first call of each pool (cold: connections opened, gold SQL run) is reported apart from the
warm reps that give the throughput. The figure is the scaling ratio: 2-worker rewards/s over
1-worker rewards/s (ideal 2.0; the target here is >= 1.5). Each call is split into the slowest
worker's own scoring time (from the trace records) and the rest (the driver's split, shipping
and merge), which does not shrink with more workers.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

from benchmarks import common

NAME = "reward"
GOAL = 1.5
MIX = ("correct", "correct", "wrong", "wrong", "wrong", "error_syntax", "error_table", "no_sql")


def response(kind: str, gold: str) -> str:
    if kind == "correct":
        return f"The answer:\n```sql\n{gold}\n```"
    if kind == "wrong":
        return f"```sql\nSELECT * FROM ({gold}) LIMIT 5 OFFSET 1\n```"
    if kind == "error_syntax":
        return f"```sql\n{gold.replace('SELECT', 'SELEC', 1)}\n```"
    if kind == "error_table":
        return "```sql\nSELECT name FROM no_such_table WHERE id = 1\n```"
    return "I am not sure which table holds this."


def build_batch(spec, questions: int):
    """``questions`` x len(MIX) rows: the fields the reward stage reads."""
    import torch

    from rlflow.batch import Batch
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_tokenizer

    train = load_split(spec, "train", common.ROOT, load_tokenizer(spec.model, common.ROOT))
    examples = [train[i] for i in range(min(questions, len(train)))]  # a question's group stays on one worker
    texts, infos = [], []
    for e in examples:
        for kind in MIX:
            texts.append(response(kind, e.reward_info["ground_truth"]))
            infos.append(dict(e.reward_info))
    width = spec.data.max_response_length
    return Batch(
        {"response_mask": torch.ones((len(texts), width), dtype=torch.long)},
        {"response_text": texts, "reward_info": infos},
    )


def start_reward_pools(workers: tuple[int, ...]):
    """{k: (pool, reward stage, spec)} for reward pools of k workers, started on one Ray."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.cluster import Demand, start_ray
    from rlflow.runtime.pools import start_pools
    from rlflow.schemas.project import load_project_config

    project = load_project_config(common.ROOT)
    os.environ.setdefault("RAY_ADDRESS", "local")  # our own embedded Ray, never a cluster someone else started
    start_ray(project, [Demand(f"reward_pool_{k}", k, 1.0, 0.0) for k in workers])
    pools = {}
    for k in workers:
        spec = load_pipeline(
            common.ROOT / "pipelines" / "bird_grpo.yaml", [f"resources.reward_pool.workers={k}"], project=project
        ).spec
        plan = compile_plan(spec)
        only = replace(plan, resources={"reward_pool": plan.resources["reward_pool"]})
        started = start_pools(only, spec.model_dump(by_alias=True, mode="json"), str(common.ROOT), 0, lambda p: {})
        pools[k] = (started, plan.stage("reward"), spec)
    return pools


def call(pool_entry, batch, step: int) -> dict:
    from rlflow.runtime.ray_executor import RayExecutor

    started, stage, spec = pool_entry
    records: list[dict] = []
    executor = RayExecutor(started, spec, trace=records.extend)
    start = time.perf_counter()
    out = executor.run_stage(stage, batch.select(batch.keys()), step)
    seconds = time.perf_counter() - start
    # the slowest worker's own scoring time; the rest of the call is the driver's split, shipping and merge
    worker = max(r["end"] - r["start"] for r in records)
    return {
        "seconds": seconds,
        "rows": len(out),
        "rewards_per_s": len(out) / seconds,
        "worker_s": worker,
        "overhead_s": seconds - worker,
        "metrics": {k: v for k, v in out.metrics.items() if k.startswith("reward/")},
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=5)
    p.add_argument(
        "--questions", type=int, default=None, help="questions per call (default: all of the train split; --quick: 4)"
    )
    return p.parse_args(argv)


def scaling_row(arms: dict, worker_scaling: float | None) -> dict:
    """2 workers over 1, round by round (the arms take turns; call i of each is round i)."""
    one, two = arms.get("workers_1", {}), arms.get("workers_2", {})
    return common.round_ratio_row(
        NAME,
        "SQL rewards/s, 2 workers / 1 worker",
        [c["rewards_per_s"] for c in two.get("calls", [])],
        [c["rewards_per_s"] for c in one.get("calls", [])],
        f">= {GOAL}x (ideal 2x)",
        lambda r: r >= GOAL,
        f"medians {common.fmt(one.get('rewards_per_s_median'))} -> {common.fmt(two.get('rewards_per_s_median'))} "
        f"rewards/s; scoring alone {common.fmt(worker_scaling)}x over all calls",
    )


def rows_from_report(report: dict) -> list[dict]:
    """The summary row of a result file by the current rules (judged round by round)."""
    return [scaling_row(report.get("arms", {}), report.get("worker_scaling_2_over_1"))]


def main(argv=None) -> None:
    args = parse_args(argv)
    questions = args.questions or (4 if args.quick else 10**9)
    rounds = args.rounds or (1 if args.quick else 5)
    import ray

    from rlflow.runtime.pools import stop_pools

    before = common.machine()
    pools = start_reward_pools((1, 2))
    try:
        batch = build_batch(next(iter(pools.values()))[2], questions)
        questions = len(batch) // len(MIX)
        print(
            f"{len(batch)} responses per call ({questions} questions x {len(MIX)}), {rounds} reps per pool", flush=True
        )
        cold = {k: call(entry, batch, 0) for k, entry in pools.items()}
        calls: dict[int, list[dict]] = {k: [] for k in pools}
        for r, order in enumerate(common.rotations(list(pools), rounds)):
            for k in order:
                calls[k].append(call(pools[k], batch, r + 1))
                print(f"  rep {r + 1}/{rounds} workers={k}: {calls[k][-1]['rewards_per_s']:.0f} rewards/s", flush=True)
    finally:
        for started, _, _ in pools.values():
            stop_pools(started)
        ray.shutdown()
    arms = {
        f"workers_{k}": {
            "rewards_per_s_median": common.median(c["rewards_per_s"] for c in cs),
            "seconds_median": common.median(c["seconds"] for c in cs),
            "worker_s_median": common.median(c["worker_s"] for c in cs),
            "overhead_s_median": common.median(c["overhead_s"] for c in cs),
            "cold": cold[k],
            "calls": cs,
        }
        for k, cs in calls.items()
    }
    scaling = common.ratio(arms["workers_2"]["rewards_per_s_median"], arms["workers_1"]["rewards_per_s_median"])
    worker_scaling = common.ratio(arms["workers_1"]["worker_s_median"], arms["workers_2"]["worker_s_median"])
    print(
        common.markdown_table(
            [
                "pool",
                "rewards/s (median, warm)",
                "seconds per call",
                "slowest worker s",
                "driver + transfer s",
                "cold call s",
            ],
            [
                [
                    k,
                    a["rewards_per_s_median"],
                    a["seconds_median"],
                    a["worker_s_median"],
                    a["overhead_s_median"],
                    a["cold"]["seconds"],
                ]
                for k, a in arms.items()
            ],
        )
    )
    print(f"scoring alone (slowest worker) scales {common.fmt(worker_scaling)}x")
    mix = calls[1][0]["metrics"] if calls[1] else {}
    print(f"scaling 2 workers / 1 worker: {common.fmt(scaling)}x (goal >= {GOAL}x); reward mix: {mix}")
    summary = [scaling_row(arms, worker_scaling)]
    report = {
        "machine": {**before, "load_avg_1m_after": common.machine()["load_avg_1m"]},
        "rows_per_call": len(batch),
        "questions": questions,
        "mix_per_question": list(MIX),
        "reward_metrics": mix,
        "rounds": rounds,
        "arms": arms,
        "scaling_2_over_1": scaling,
        "worker_scaling_2_over_1": worker_scaling,
        "summary": summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
