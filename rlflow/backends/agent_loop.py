"""The multi-turn agent loop over a rollout's batched decode: verl's ``ToolAgentLoop``, one batched call per turn.

Each turn every live row decodes together (``decode``: the engine's batched sampler over the
rows' prompt + transcript so far); a row's turn ends at EOS or at its budget. Then, as verl:
the trajectory ends when the response budget (``max_response_length``, every turn counted) is
spent, at ``max_assistant_turns`` or ``max_user_turns``, or on an answer without tool calls;
otherwise its hermes calls (the first ``max_parallel_calls``) run, all rows' calls of the turn in
one message to the tool process, and their answers are appended as ``tool`` messages, rendered
by the tokenizer's chat template (the text the conversation gains, tokenized), unless they would
spend the budget, which ends the trajectory. Model tokens get ``response_mask`` 1 and their
sampled log-probs; tool tokens get 0 for both. ``num_turns`` is verl's: user + assistant turns + 1.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.hermes import ToolCall, parse_tool_calls
from rlflow.tools.runner import ToolResult

# (sequences of live rows, the most new tokens, turn) -> per row: (new tokens through EOS, their log-probs)
Decode = Callable[[list[list[int]], int, int], list[tuple[list[int], list[float]]]]


@dataclass
class Trajectory:
    tokens: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0
    calls: list[ToolResult] = field(default_factory=list)

    @property
    def num_turns(self) -> int:
        return self.user_turns + self.assistant_turns + 1


class ToolTurn:
    """Renders tool answers as the conversation's next tokens: the chat template's delta after a model turn."""

    _BASE = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.base = tokenizer.apply_chat_template(self._BASE, tokenize=False, add_generation_prompt=False)

    def tokens(self, texts: list[str]) -> list[int]:
        messages = [*self._BASE, *({"role": "tool", "content": text} for text in texts)]
        full = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not full.startswith(self.base):
            raise ValueError("the chat template renders a conversation differently once a tool message follows")
        return self.tokenizer(full[len(self.base) :], add_special_tokens=False)["input_ids"]


def run_agent_loop(
    prompts: list[list[int]],
    decode: Decode,
    call_tools: Callable[[list[tuple[int, ToolCall]]], list[ToolResult]],
    render: Callable[[list[str]], list[int]],
    text_of: Callable[[list[int]], str],
    config: MultiTurnConfig,
    budget: int,
) -> list[Trajectory]:
    """One trajectory per prompt (token ids, no padding); ``call_tools`` gets a turn's (row, call) pairs."""
    rows = [Trajectory() for _ in prompts]
    live = list(range(len(prompts)))
    turn = 0
    while live:
        room = [budget - len(rows[r].tokens) for r in live]
        outputs = decode([prompts[r] + rows[r].tokens for r in live], max(room), turn)
        turn += 1
        pending: dict[int, list] = {}
        for r, left, (tokens, log_probs) in zip(live, room, outputs, strict=True):
            row = rows[r]
            row.tokens += tokens[:left]
            row.mask += [1] * len(tokens[:left])
            row.log_probs += log_probs[:left]
            row.assistant_turns += 1
            if len(row.tokens) >= budget:
                continue
            if config.max_assistant_turns and row.assistant_turns >= config.max_assistant_turns:
                continue
            if config.max_user_turns and row.user_turns >= config.max_user_turns:
                continue
            _, calls = parse_tool_calls(text_of(tokens))
            if calls:
                pending[r] = calls[: config.max_parallel_calls]
        flat = [(r, call) for r, calls in pending.items() for call in calls]
        results = call_tools(flat) if flat else []
        answers: dict[int, list[ToolResult]] = defaultdict(list)
        for (r, _), result in zip(flat, results, strict=True):
            answers[r].append(result)
        live = []
        for r, results_of_row in answers.items():
            row = rows[r]
            row.calls += results_of_row
            observation = render([result.text for result in results_of_row])
            if len(row.tokens) + len(observation) >= budget:
                continue
            row.tokens += observation
            row.mask += [0] * len(observation)
            row.log_probs += [0.0] * len(observation)
            row.user_turns += 1
            live.append(r)
        live.sort()
    return rows


def rows_tools_kwargs(batch) -> list[dict]:
    """Each row's verl ``tools_kwargs`` (``reward_info["extra_info"]["tools_kwargs"]``, as verl's dataset
    reads it), ``{}`` where a row has none or it is not a mapping."""
    infos = batch["reward_info"] if "reward_info" in batch else [{}] * len(batch)
    out = []
    for info in infos:
        extra = info.get("extra_info") if isinstance(info, dict) else None
        kwargs = extra.get("tools_kwargs") if isinstance(extra, dict) else None
        out.append(kwargs if isinstance(kwargs, dict) else {})
    return out


def tool_metrics(rows: list[Trajectory]) -> dict[str, float]:
    """Per tool: calls per trajectory, the share of calls that failed, mean seconds per call."""
    calls = [call for row in rows for call in row.calls]
    out: dict[str, float] = {}
    for name in sorted({call.name for call in calls}):
        mine = [call for call in calls if call.name == name]
        out[f"tool/{name}/calls"] = len(mine) / max(len(rows), 1)
        out[f"tool/{name}/error_ratio"] = sum(call.error for call in mine) / len(mine)
        out[f"tool/{name}/seconds_mean"] = sum(call.seconds for call in mine) / len(mine)
    if rows:
        out["tool/calls"] = len(calls) / len(rows)
        out["tool/error_ratio"] = sum(call.error for call in calls) / len(calls) if calls else 0.0
    return out
