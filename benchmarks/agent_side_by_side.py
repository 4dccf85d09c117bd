"""Single-turn against multi-turn on BIRD: the same wall time each, accuracy at fixed minutes, and a step's cost.

``python -m benchmarks.bench_learning --task bird_agent --side-by-side`` runs, one seed, one after
the other:

- ``pipelines/bird_grpo.yaml`` (the model answers at once) and ``pipelines/bird_grpo_agent.yaml``
  (it may query the database first) for ``--minutes`` of stages each, stopped as
  ``benchmarks.side_by_side`` stops a recipe; each one's validation accuracy is read at the last
  validation within 5, 10 and 15 minutes (and the budget);
- the single-turn pipeline again with the agent's response budget (``data.max_response_length``)
  for ``COST_STEPS`` steps, so that a multi-turn step's seconds are compared with a single-turn
  step's under the same budget (the goal: at most 1.5x).

It writes ``benchmarks/results/agent_side_by_side.json``, the picture ``docs/learning_agent.png``
and the table between ``<!-- agent:start -->`` and ``<!-- agent:end -->`` in docs/benchmarks.md.
``--agent-run DIR`` and ``--single-run DIR`` take an arm from a finished run of its pipeline with the
same seed (``bench_learning`` keeps its seeds' run directories) instead of running it again; it is
read the same way, cut at the budget (a run that finished sooner keeps its last validation). ``--quick`` runs 2 steps of each without the
budget (figures mean nothing; the docs are left alone).
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import common, side_by_side

RESULTS = common.RESULTS
PICTURE = common.ROOT / "docs" / "learning_agent.png"
MARKERS = ("<!-- agent:start -->", "<!-- agent:end -->")
ARMS = (("single-turn", "pipelines/bird_grpo.yaml"), ("multi-turn", "pipelines/bird_grpo_agent.yaml"))
ARM_NAMES = {"single-turn": "bird-grpo", "multi-turn": "bird-grpo-agent"}  # the pipelines' names
AGENT_BUDGET = 256  # data.max_response_length of bird_grpo_agent.yaml
COST_STEPS = 12  # steps of the single-turn run under the agent's response budget (the first 2 are left out)
MARKS = (5.0, 10.0, 15.0)
COST_GOAL = 1.5


def accuracy_at(run: dict, minutes: float) -> float | None:
    """Validation accuracy at the last validation that ended within ``minutes``."""
    points = [acc for at, acc in run["curve"] if at <= minutes]
    return points[-1] if points else None


def table(runs: list[dict], marks: tuple[float, ...]) -> str:
    head = " | ".join(f"after {m:g} min" for m in marks)
    lines = [
        f"| rollout | pipeline | val acc before | {head} | steps | s/step | num_turns/mean |",
        "|---|---|---:|" + "---:|" * len(marks) + "---:|---:|---:|",
    ]
    for r in runs:
        cells = " | ".join("-" if (a := accuracy_at(r, m)) is None else f"{a:.2f}" for m in marks)
        turns = "-" if r["num_turns_mean"] is None else f"{r['num_turns_mean']:.2f}"
        lines.append(
            f"| {r['algorithm']} | `{r['pipeline']}` | {r['before']:.2f} | {cells} | {r['steps']} | "
            f"{r['step_seconds']:.1f} | {turns} |"
        )
    return "\n".join(lines)


def step_cost(agent: dict, same_budget: dict) -> dict:
    """Seconds per step of the multi-turn run over those of the single-turn run at the same response budget,
    and the same per response token (a transcript holds its tool turns: it is longer than an answer)."""
    ratio = agent["step_seconds"] / same_budget["step_seconds"]
    per_token = {
        name: run["step_seconds"] / run["response_length_mean"] * 1000
        for name, run in (("multi_turn", agent), ("single_turn", same_budget))
        if run.get("response_length_mean")
    }
    return {
        "multi_turn_s": agent["step_seconds"],
        "single_turn_same_budget_s": same_budget["step_seconds"],
        "ratio": ratio,
        "goal": COST_GOAL,
        "met": ratio <= COST_GOAL,
        "response_length": [agent.get("response_length_mean"), same_budget.get("response_length_mean")],
        "ms_per_response_token": per_token,
        "per_token_ratio": per_token["multi_turn"] / per_token["single_turn"] if len(per_token) == 2 else None,
    }


def per_token_text(cost: dict) -> str:
    """The step cost per response token, in words (empty when a run logged no response lengths)."""
    if cost["per_token_ratio"] is None:
        return ""
    multi, single = cost["response_length"]
    return (
        f"The responses differ: a transcript averages {multi:.0f} tokens (its call, the rows read and the answer), "
        f"a single-turn answer {single:.0f}; per response token the multi-turn step costs "
        f"{cost['ms_per_response_token']['multi_turn']:.0f} ms against {cost['ms_per_response_token']['single_turn']:.0f} "
        f"ms ({cost['per_token_ratio']:.2f}x)."
    )


def picture(runs: list[dict], output: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for r in runs:
        xs, ys = zip(*r["curve"])
        ax.plot(xs, ys, marker="o", markersize=3, label=r["algorithm"])
    for mark in MARKS:
        ax.axvline(mark, color="#9aa0a6", linestyle=":", linewidth=1)
    ax.set_xlabel("wall minutes (from the first stage)")
    ax.set_ylabel("validation execution accuracy")
    ax.set_title("BIRD: answering at once vs querying the database first (one seed, equal wall time)")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(output, dpi=110)


def finished_arm(arm: int, run_dir: Path, seed: int, minutes: float | None) -> dict:
    """Arm ``arm`` (an index of ``ARMS``) read from a finished run of its pipeline (``--single-run``, ``--agent-run``)."""
    import yaml

    name, pipeline = ARMS[arm]
    resolved = yaml.safe_load((run_dir / "pipeline.resolved.yaml").read_text())
    if resolved.get("name") != ARM_NAMES[name] or resolved.get("trainer", {}).get("seed") != seed:
        raise SystemExit(f"{run_dir}: the {name} arm must be a run of {pipeline} with trainer.seed={seed}")
    return side_by_side.read_recipe(name, seed, run_dir, minutes, pipeline)


def agent_side_by_side(
    seed: int, minutes: float, quick: bool, sets: list[str], runs_root: Path, out, finished: tuple = (None, None)
) -> int:
    """``finished``: run directories to read the single-turn and the multi-turn arm from (None: run it)."""
    from benchmarks.bench_learning import QUICK_SETS, machine

    commit = common.commit_id()
    budget = None if quick else minutes
    extra = [*(QUICK_SETS if quick else side_by_side.BUDGET_SETS), *sets]
    runs = [
        finished_arm(i, finished[i], seed, budget)
        if finished[i] is not None
        else side_by_side.run_recipe(name, seed, extra, runs_root / name, budget, pipeline)
        for i, (name, pipeline) in enumerate(ARMS)
    ]
    cost_sets = [
        *(
            QUICK_SETS
            if quick
            else (f"trainer.total_steps={COST_STEPS}", "trainer.test_freq=-1", "trainer.save_freq=-1")
        ),
        f"data.max_response_length={AGENT_BUDGET}",
        "trainer.val_before_train=true",
        *sets,
    ]
    same_budget = side_by_side.run_recipe(
        f"single-turn, max_response_length {AGENT_BUDGET}", seed, cost_sets, runs_root / "same-budget", None, ARMS[0][1]
    )
    cost = step_cost(runs[1], same_budget)
    marks = tuple(m for m in MARKS if budget is None or m <= budget) + ((budget,) if budget not in MARKS else ())
    print()
    print(table(runs, marks))
    print(
        f"\nmulti-turn step {cost['multi_turn_s']:.1f} s vs single-turn {cost['single_turn_same_budget_s']:.1f} s "
        f"at the same response budget: {cost['ratio']:.2f}x (goal <= {COST_GOAL}x)"
    )
    result = {
        "task": "bird_agent",
        "quick": quick,
        "minutes_each": budget,
        "seed": seed,
        "extra_sets": extra,
        "commit": commit,
        "machine": machine(),
        "runs": runs,
        "same_budget_run": same_budget,
        "step_cost": cost,
    }
    out = Path(out) if out else RESULTS / ("agent_side_by_side_quick.json" if quick else "agent_side_by_side.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    if not quick:
        picture(runs, PICTURE)
        command = "python -m benchmarks.bench_learning --task bird_agent --side-by-side" + (
            f" --minutes {minutes:g}" if minutes != 10 else ""
        )
        side_by_side.write_doc(
            f"`{command}` (commit {commit}, {result['machine']['cpus']} CPUs, seed {seed}):\n\n"
            + table(runs, marks)
            + f"\n\nA multi-turn step: {cost['multi_turn_s']:.1f} s; a single-turn step with the same response "
            f"budget ({AGENT_BUDGET} tokens): {cost['single_turn_same_budget_s']:.1f} s, so "
            f"{cost['ratio']:.2f}x (goal <= {COST_GOAL}x). {per_token_text(cost)}\n\n"
            f"![accuracy over wall time]({PICTURE.name})\n",
            markers=MARKERS,
        )
    print(f"\nfigures in {out}")
    return 0
