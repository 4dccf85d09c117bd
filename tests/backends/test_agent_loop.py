"""The agent loop over a scripted decode: turns, stops, budgets and masks, with the real tokenizer and template.

The decode answers each live row with a scripted turn (the layer's one fake: the batched
sampler is tested in tests/backends/local); tools are plain results. Checked: every live row
decodes in the same call, tool answers are the chat template's delta and masked out, the
trajectory ends on an answer, at the turn limits and at the budget, as verl's ToolAgentLoop.
"""

from __future__ import annotations

import pytest

from rlflow.backends.agent_loop import ToolTurn, rows_tools_kwargs, run_agent_loop, tool_metrics
from rlflow.batch import Batch
from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.runner import ToolResult


@pytest.fixture(scope="module")
def tokenizer():
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    return load_tokenizer(ModelSpec())


CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'


class Script:
    """Per row, the text of each of its turns; records the rows of every decode call."""

    def __init__(self, tokenizer, turns: list[list[str]]) -> None:
        self.tokenizer, self.turns, self.calls = tokenizer, turns, []
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def decode(self, sequences, max_new, turn):
        self.calls.append((len(sequences), max_new))
        out = []
        for sequence in sequences:
            row = next(i for i, p in enumerate(self.prompts) if sequence[: len(p)] == p)
            ids = self.tokenizer(self.turns[row][turn], add_special_tokens=False)["input_ids"] + [self.eos]
            out.append((ids[:max_new], [-0.5] * min(len(ids), max_new)))
        return out


def run(tokenizer, turns, config=None, budget=200, results=None):
    prompts = [tokenizer(f"question {i}", add_special_tokens=False)["input_ids"] for i in range(len(turns))]
    script = Script(tokenizer, turns)
    script.prompts = prompts
    seen = []

    def call_tools(calls):
        seen.append([call for _, call in calls])
        return [ToolResult(c.name, results or "3") for _, c in calls]

    rows = run_agent_loop(
        prompts,
        script.decode,
        call_tools,
        ToolTurn(tokenizer).tokens,
        lambda ids: tokenizer.decode(ids),
        config or MultiTurnConfig(enable=True),
        budget,
    )
    return rows, script, seen


def test_rows_finish_at_different_turns_and_tool_tokens_are_masked(tokenizer):
    rows, script, seen = run(tokenizer, [["final"], [CALL, "answer 3"], [CALL, CALL, "done"]])
    assert [r.num_turns for r in rows] == [2, 4, 6]  # verl's: user + assistant turns + 1
    assert script.calls[0][0] == 3 and script.calls[1][0] == 2 and script.calls[2][0] == 1  # one call per turn
    assert [len(calls) for calls in seen] == [2, 1]
    row = rows[1]
    observation = ToolTurn(tokenizer).tokens(["3"])
    text = tokenizer.decode(row.tokens)
    assert text.startswith(CALL) and "<|im_start|>tool\n3<|im_end|>\n<|im_start|>assistant\n" in text
    first = len(tokenizer(CALL, add_special_tokens=False)["input_ids"]) + 1
    assert row.mask == [1] * first + [0] * len(observation) + [1] * (len(row.tokens) - first - len(observation))
    assert row.tokens[first : first + len(observation)] == observation
    assert all((lp == 0.0) == (m == 0) for lp, m in zip(row.log_probs, row.mask, strict=True))


def test_turn_limits_end_the_trajectory(tokenizer):
    turns = [[CALL, CALL, CALL, "x"]]
    rows, _, _ = run(tokenizer, turns, MultiTurnConfig(enable=True, max_assistant_turns=2))
    assert (rows[0].assistant_turns, rows[0].user_turns) == (2, 1)
    rows, _, _ = run(tokenizer, turns, MultiTurnConfig(enable=True, max_user_turns=1))
    assert (rows[0].assistant_turns, rows[0].user_turns) == (2, 1)


def test_the_budget_counts_every_turn(tokenizer):
    call = len(tokenizer(CALL, add_special_tokens=False)["input_ids"]) + 1  # through EOS
    observation = len(ToolTurn(tokenizer).tokens(["3"]))
    budget = call + observation + 20  # the second turn is cut at 20 tokens
    rows, script, _ = run(tokenizer, [[CALL, CALL, CALL, "x"]], budget=budget)
    assert [max_new for _, max_new in script.calls] == [budget, 20]
    assert rows[0].mask == [1] * call + [0] * observation + [1] * 20
    assert (rows[0].assistant_turns, rows[0].user_turns) == (2, 1)
    # a tool answer that would spend the budget ends the trajectory, as verl
    rows, _, _ = run(tokenizer, [[CALL, "x"]], budget=40, results="y" * 200)
    assert rows[0].user_turns == 0 and rows[0].mask == [1] * len(rows[0].tokens)


def test_parallel_calls_are_capped(tokenizer):
    _, _, seen = run(tokenizer, [[CALL + CALL + CALL, "x"]], MultiTurnConfig(enable=True, max_parallel_calls=2))
    assert len(seen[0]) == 2


def test_tool_metrics():
    from rlflow.backends.agent_loop import Trajectory

    rows = [
        Trajectory(calls=[ToolResult("add", "1", seconds=0.2), ToolResult("add", "e", error=True)]),
        Trajectory(),
    ]
    assert tool_metrics(rows) == {
        "tool/add/calls": 1.0,
        "tool/add/error_ratio": 0.5,
        "tool/add/seconds_mean": pytest.approx(0.1),
        "tool/calls": 1.0,
        "tool/error_ratio": 0.5,
    }


def test_each_rows_tools_kwargs_come_from_its_reward_info_and_odd_shapes_are_empty():
    good = {"run_sql": {"create_kwargs": {"db_path": "/d/a.sqlite"}}}
    infos = [
        {"extra_info": {"tools_kwargs": good}},
        {"extra_info": {"tools_kwargs": ["x"]}},
        {"extra_info": 3},
        "x",
        {},
    ]
    batch = Batch({}, {"reward_info": infos})
    assert rows_tools_kwargs(batch) == [good, {}, {}, {}, {}]
    assert rows_tools_kwargs(Batch({}, {"uid": ["a", "b"]})) == [{}, {}]
