"""What a reward model costs: the same step scored by the rule against scored by a reward model on its own pool.

    python -m benchmarks.bench_reward_model            # 3 rounds, 8 steps per arm
    python -m benchmarks.bench_reward_model --quick    # tiny sizes, 3 steps per arm, 1 round

Arms, interleaved per round: ``rule`` is pipelines/ranking_grpo.yaml, ``reward_model`` is
pipelines/ranking_rm.yaml (the same step with ``rm_score`` on a 1-CPU pool of its own before the rule
stage, the model's score replacing the rule's). A figure is the median ``timing_s/step`` of the steps
after the first two; the ratio reward_model / rule is taken per round. From the reward-model arm's trace,
every resource's busy share of the timed steps' wall time says how much of the step the reward model's
pool worked. In ``sync`` mode nothing overlaps the reward model's forward: the ratio is its cost.

Goal: reward_model / rule <= 1.3x in every round.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from benchmarks import common

NAME = "reward_model"
ARMS = {"rule": "pipelines/ranking_grpo.yaml", "reward_model": "pipelines/ranking_rm.yaml"}
GOAL = 1.3
RM_POOL = "rm_pool"
BASE_SETS = ("trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1")
SKIP = 2  # warm-up steps left out of every figure


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes, 3 steps per arm, 1 round")
    p.add_argument("--rounds", type=int, default=None, help="default 3 (1 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="steps per arm (default 8, 3 with --quick)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per arm")
    p.add_argument("--out", type=Path, default=None)
    return p.parse_args(argv)


def run_arm(arm: str, sets: list[str], place: Path, timeout: float) -> dict:
    run_dir, log = place / arm, place / f"{arm}.log"
    result = common.run_rlflow(ARMS[arm], sets, run_dir, log=log, timeout=timeout)
    steps = common.step_times(result.pop("metrics"), skip=SKIP)
    result["busy_share"] = common.busy_shares(result.pop("trace"), SKIP + 1)
    return {"step_s": common.median(steps), "steps_s": steps, **result}


def summarise(runs: dict[str, list[dict]]) -> tuple[dict, list[dict]]:
    """The per-round ratios, the reward pool's busy share, and the results-table row."""
    rule, model = runs["rule"], runs["reward_model"]
    shares = [r["busy_share"].get(RM_POOL) for r in model if r.get("busy_share")]
    share = common.median(s for s in shares if s is not None)
    row = common.round_ratio_row(
        NAME,
        "step time with the reward model on its own pool / with the rule reward "
        "(`python -m benchmarks.bench_reward_model`)",
        [r["step_s"] for r in model],
        [r["step_s"] for r in rule],
        f"<= {GOAL:g}x",
        lambda r: r <= GOAL,
        f"{RM_POOL} busy {common.fmt(share)} of the step",
    )
    figures = {
        "rule_s": common.median(r["step_s"] for r in rule),
        "reward_model_s": common.median(r["step_s"] for r in model),
        "ratio": row["measured"],
        "rm_pool_busy_share": share,
    }
    return figures, [row]


def main(argv=None) -> None:
    args = parse_args(argv)
    steps = args.steps or (3 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 3)
    sets = [*BASE_SETS, f"trainer.total_steps={steps}"]
    sets += list(common.QUICK_SETS if args.quick else ())
    before = common.machine()
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for r, order in enumerate(common.rotations(list(ARMS), rounds)):
        for arm in order:
            print(f"round {r + 1}/{rounds}: {arm} ...", flush=True)
            result = run_arm(arm, sets, common.ROOT / "runs" / "bench-reward-model" / f"round{r + 1}", args.timeout)
            runs[arm].append(result)
            print(
                f"  step {common.fmt(result['step_s'])} s, busy {result['busy_share']}"
                + (f" ERROR {result['error'][-300:]}" if "error" in result else ""),
                flush=True,
            )
    figures, summary = summarise(runs)
    print(
        common.markdown_table(
            ["rule s", "reward model s", "ratio (median of rounds)", f"{RM_POOL} busy share"],
            [[figures["rule_s"], figures["reward_model_s"], figures["ratio"], figures["rm_pool_busy_share"]]],
        )
    )
    report = {
        "steps_per_arm": steps,
        "skipped_steps": SKIP,
        "machine": {
            **before,
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_1m_after": common.machine()["load_avg_1m"],
        },
        "figures": figures,
        "runs": runs,
        "summary": summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
