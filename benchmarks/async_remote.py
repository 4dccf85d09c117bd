"""The remote case of the overlap benchmark: generate on the reference backend, the actor local.

    python -m benchmarks.async_remote --quick      # prints the two arms and the ratio (no result file)

``remote_case(rounds)`` runs ``pipelines/bird_grpo_remote_async.yaml`` as a user runs it, the
same file twice per round, interleaved: ``--set trainer.trainer_mode=sync`` and the shipped
``separate_async``, at the step benchmarks' sizes (16 prompts x 8 samples x 48 tokens). The
rollout runs in the out-of-process ``reference`` server, the log-prob passes and the update on a
local pool, and the actor's weights cross the wire after every update. Goal: async <= 0.75x sync.

Step time is the period between step ends, not ``timing_s/step``: overlapped, a step's stages
start before the previous step ends, so its own timer no longer measures throughput. A step ends
with its last trace record; the period is (end of the last step - end of step ``skip``) / the
steps between, the same measure in both modes. ``benchmarks/bench_async.py`` reports the figure
(its summary row comes from here); this module writes no result file of its own.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks import common

NAME = "async"
PIPELINE = "pipelines/bird_grpo_remote_async.yaml"
ARMS = {"sync": ("trainer.trainer_mode=sync",), "async": ()}
GOAL = 0.75


def step_ends(trace: list[dict[str, Any]]) -> dict[int, float]:
    """Step -> when its last record ended (step 0, the init phase, left out)."""
    ends: dict[int, float] = {}
    for r in trace:
        if r["step"] > 0:
            ends[r["step"]] = max(ends.get(r["step"], r["end"]), r["end"])
    return ends


def step_period(trace: list[dict[str, Any]], skip: int = 2) -> float | None:
    """Seconds per step after the first ``skip`` (warm-up), from step ends; None without two ends to span."""
    ends = step_ends(trace)
    if not ends or max(ends) <= skip or (skip and skip not in ends):
        return None
    last = max(ends)
    start = ends[skip] if skip else min(r["start"] for r in trace if r["step"] > 0)
    return (ends[last] - start) / (last - skip)


def remote_case(rounds: int, *, quick: bool = False, steps: int | None = None, timeout: float = 3600) -> dict[str, Any]:
    """Both arms, ``rounds`` interleaved rounds each: medians, the ratio and the summary row."""
    steps = steps or (4 if quick else 8)
    skip = 2 if steps > 3 else 0
    model_dir, _ = common.bench_model_dir()
    sets = [
        f"model_path={model_dir}",
        *common.STEP_SETS,
        *(common.QUICK_SETS if quick else ()),
        f"trainer.total_steps={steps}",
    ]
    work = common.ROOT / "runs" / "bench-async-remote"
    periods: dict[str, list[float | None]] = {arm: [] for arm in ARMS}
    errors: dict[str, list[str]] = {arm: [] for arm in ARMS}
    for r, order in enumerate(common.rotations(list(ARMS), rounds)):
        for arm in order:
            print(f"remote case, round {r + 1}/{rounds}: {arm} ({steps} steps) ...", flush=True)
            result = common.run_rlflow(
                PIPELINE,
                [*sets, *ARMS[arm]],
                work / f"round{r + 1}" / arm,
                log=work / f"round{r + 1}" / f"{arm}.log",
                timeout=timeout,
            )
            periods[arm].append(step_period(result["trace"], skip))
            if "error" in result:
                errors[arm].append(result["error"][-400:])
            print(f"  {arm}: {common.fmt(periods[arm][-1])} s/step", flush=True)
    arms = {
        arm: {"step_s_median": common.median(periods[arm]), "step_s_per_round": periods[arm], "errors": errors[arm]}
        for arm in ARMS
    }
    ratio = common.ratio(arms["async"]["step_s_median"], arms["sync"]["step_s_median"])
    shown = None
    if ratio is not None:
        shown = (
            f"{ratio:.3f} ({common.fmt(arms['async']['step_s_median'])} s vs "
            f"{common.fmt(arms['sync']['step_s_median'])} s a step, {rounds} rounds)"
        )
    row = common.goal_row(
        NAME,
        "step time with generate on the reference remote backend: async / sync",
        ratio,
        f"<= {GOAL}",
        None if ratio is None else ratio <= GOAL,
        shown,
        "; ".join(e[-200:] for errs in errors.values() for e in errs),
    )
    return {"pipeline": PIPELINE, "steps": steps, "skip": skip, "arms": arms, "ratio": ratio, "summary": [row]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 round: proves the path")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 3; --quick: 1)")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 8; --quick: 4)")
    args = parser.parse_args(argv)
    case = remote_case(args.rounds or (1 if args.quick else 3), quick=args.quick, steps=args.steps)
    print(
        common.markdown_table(
            ["arm", "s/step (median)", "per round"],
            [
                [arm, a["step_s_median"], ", ".join(common.fmt(x) for x in a["step_s_per_round"])]
                for arm, a in case["arms"].items()
            ],
        )
    )
    print(f"async / sync: {common.fmt(case['ratio'])} (goal <= {GOAL})")


if __name__ == "__main__":
    main()
