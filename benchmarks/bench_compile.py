"""Does validation and compilation stay linear in the number of stages? 10, 100 and 1000 stages.

    python -m benchmarks.bench_compile            # 10 / 100 / 1000 stages, 7 reps each
    python -m benchmarks.bench_compile --quick    # 10 / 100 stages, 2 reps

Each size is a generated pipeline file: bird_grpo's seven stages plus a chain of ``bench_relay``
stages (a stage kind this script registers, as a plugin would: it reads the field its
``with.input`` names and writes ``with.output``), hanging off the reward's ``scores``. The
chain is written in REVERSE order in the file, so the compiler's topological sort has to
reorder every stage; the shape exercises the data-flow analysis (producers, edges, cycle and
missing-producer checks), not just parsing.

Measured, in this process, interleaved across sizes:
- validate: ``rlflow.schemas.pipeline_file.load_pipeline`` on the file (read, render, parse,
  pydantic, semantic checks; every error collected);
- compile: ``rlflow.plan.compile.compile_plan`` on the valid spec.

Reported: median seconds and seconds per stage at each size, and the growth exponent between
100 and 1000 stages (log(t1000 / t100) / log 10: 1.0 is linear). Goal: <= 1.1 for both. A
sample is the mean of enough back-to-back runs to last at least 0.2 s (a small pipeline
compiles in a millisecond or two, where one timing is mostly jitter); the median is taken over
the interleaved samples.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

from benchmarks import common

NAME = "compile"
GOAL_EXPONENT = 1.1
BASE = """\
name: bench-{size}
model: {{path: builtin:tiny-qwen2}}
data: {{format: bird, train: rlflow/assets/data/bird_sample/train.json, val: rlflow/assets/data/bird_sample/dev.json, databases: rlflow/assets/data/bird_sample/databases}}
algorithm: {{adv_estimator: grpo, n: 8, use_kl_loss: true}}
trainer: {{train_batch_size: 16, ppo_mini_batch_size: 8, total_steps: 30, save_freq: 10, test_freq: 10}}
resources:
  actor_pool: {{type: local, device: auto}}
  reward_pool: {{type: cpu, workers: 2}}
stages:
"""
CORE = (
    "  - {name: generate,     uses: generate,        on: actor_pool}",
    "  - {name: reward,       uses: text2sql_reward, on: reward_pool}",
    "  - {name: old_log_prob, uses: old_log_prob,    on: actor_pool}",
    "  - {name: ref_log_prob, uses: ref_log_prob,    on: actor_pool}",
    "  - {name: advantage,    uses: grpo_advantage,  on: driver}",
    "  - {name: update_actor, uses: update_actor,    on: actor_pool}",
    "  - {name: sync_weights, uses: sync_weights,    on: actor_pool}",
)


def register_relay_kind() -> None:
    """``bench_relay``: a driver stage kind whose read and written fields come from its config."""
    from rlflow.stages import STAGE_KINDS, StageConfig, StageKind, register_stage

    if "bench_relay" in STAGE_KINDS.names():
        return

    class RelayConfig(StageConfig):
        input: str
        output: str

    @register_stage
    class BenchRelay(StageKind):
        name = "bench_relay"
        config_model = RelayConfig
        allowed_on = frozenset({"driver", "cpu"})
        dispatch = "driver"
        description = "Benchmark stage: passes one field on under another name."

        @classmethod
        def reads(cls, pipeline, stage):
            return (stage.with_["input"],)

        @classmethod
        def writes(cls, pipeline, stage):
            return (stage.with_["output"],)

        def run(self, batch, ctx):
            from rlflow.batch import Batch

            return Batch({ctx.config.output: batch[ctx.config.input]})


def pipeline_text(size: int) -> str:
    """A pipeline of ``size`` stages: the seven core ones and a reversed chain of relays."""
    relays = [
        f"  - {{name: relay_{i}, uses: bench_relay, on: driver, "
        f"with: {{input: {'scores' if i == 1 else f'relay_field_{i - 1}'}, output: relay_field_{i}}}}}"
        for i in range(1, size - len(CORE) + 1)
    ]
    return BASE.format(size=size) + "\n".join([*CORE, *reversed(relays)]) + "\n"


def measure(path: Path, repeat: int = 1) -> dict[str, float]:
    """Mean seconds of ``repeat`` back-to-back validations and compilations of ``path``."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan

    start = time.perf_counter()
    for _ in range(repeat):
        loaded = load_pipeline(path)
    validated = time.perf_counter()
    for _ in range(repeat):
        plan = compile_plan(loaded.spec)
    compiled = time.perf_counter()
    assert len(plan.step) >= len(loaded.spec.stages), "the plan lost stages"
    return {"validate_s": (validated - start) / repeat, "compile_s": (compiled - validated) / repeat}


def repeats_for(path: Path, floor_s: float) -> int:
    """How many back-to-back runs make one sample last at least ``floor_s`` (timer and jitter wash out)."""
    once = measure(path)
    return max(1, math.ceil(floor_s / max(min(once.values()), 1e-6)))


def exponent(small: float | None, large: float | None, factor: float) -> float | None:
    return None if not small or not large else math.log(large / small) / math.log(factor)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=7)
    p.add_argument(
        "--sizes", type=int, nargs="+", default=None, help="stage counts (default 10 100 1000; --quick: 10 100)"
    )
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    sizes = args.sizes or ([10, 100] if args.quick else [10, 100, 1000])
    rounds = args.rounds or (2 if args.quick else 7)
    register_relay_kind()
    work = common.ROOT / "runs" / "bench-compile"
    work.mkdir(parents=True, exist_ok=True)
    files = {}
    for size in sizes:
        files[size] = work / f"pipeline_{size}.yaml"
        files[size].write_text(pipeline_text(size))
    measure(files[sizes[0]])  # warm-up: imports and pydantic's first validation
    repeats = {size: repeats_for(files[size], 0.02 if args.quick else 0.2) for size in sizes}
    before = common.machine()
    samples: dict[int, list[dict]] = {s: [] for s in sizes}
    for order in common.rotations(sizes, rounds):
        for size in order:
            samples[size].append(measure(files[size], repeats[size]))
    rows, per_size = [], {}
    for size in sizes:
        v = common.median(x["validate_s"] for x in samples[size])
        c = common.median(x["compile_s"] for x in samples[size])
        per_size[size] = {
            "stages": size,
            "validate_s": v,
            "compile_s": c,
            "validate_ms_per_stage": 1000 * v / size,
            "compile_ms_per_stage": 1000 * c / size,
            "repeats_per_sample": repeats[size],
            "samples": samples[size],
        }
        rows.append([size, 1000 * v, 1000 * v / size, 1000 * c, 1000 * c / size])
    print(common.markdown_table(["stages", "validate ms", "validate ms/stage", "compile ms", "compile ms/stage"], rows))
    lo, hi = (100, 1000) if {100, 1000} <= set(sizes) else (sizes[-2], sizes[-1])
    growth = {
        what: exponent(per_size[lo][f"{what}_s"], per_size[hi][f"{what}_s"], hi / lo)
        for what in ("validate", "compile")
    }
    print(
        f"growth exponent {lo} -> {hi} stages: validate {common.fmt(growth['validate'])}, "
        f"compile {common.fmt(growth['compile'])} (1.0 = linear; goal <= {GOAL_EXPONENT})"
    )
    summary = [
        common.goal_row(
            NAME,
            f"{what}: growth exponent {lo} -> {hi} stages",
            growth[what],
            f"<= {GOAL_EXPONENT} (linear)",
            None if growth[what] is None else growth[what] <= GOAL_EXPONENT,
            None
            if growth[what] is None
            else f"{growth[what]:.2f} ({per_size[hi][f'{what}_ms_per_stage']:.2f} ms/stage "
            f"at {hi}, {1000 * per_size[hi][f'{what}_s']:.0f} ms total)",
        )
        for what in ("validate", "compile")
    ]
    report = {
        "machine": {**before, "load_avg_1m_after": common.machine()["load_avg_1m"]},
        "sizes": per_size,
        "rounds": rounds,
        "growth_exponent": growth,
        "growth_between": [lo, hi],
        "summary": summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
