"""The multi-turn agent loop over a rollout's batched decode: verl's ``ToolAgentLoop``, one batched call per turn.

Each turn every live row decodes together; a trajectory ends as verl's does (the budget, the turn limits, an
answer without tool calls), otherwise its hermes calls run in the tool process and their answers join it.
Design notes: docs/design/agent_loop.md.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.hermes import ToolCall, parse_tool_calls
from rlflow.tools.runner import ToolResult
from rlflow.tools.text import valid_text

log = logging.getLogger(__name__)

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
    dropped: list[str] = field(default_factory=list)  # why verl's parser drops each call it dropped here
    over_budget: bool = False  # ended because its tools' answers did not fit in the response budget

    @property
    def num_turns(self) -> int:
        return self.user_turns + self.assistant_turns + 1


class ToolTurn:
    """Renders tool answers as the conversation's next tokens: the chat template's delta after a model turn.

    The answers are a tool's (or an error echoing the model's call) and never the template's own: a lone
    surrogate in one becomes U+FFFD, and a control token written in one (the tokenizer's special tokens:
    ``<|im_end|>``, EOS) is tokenized as the text it is, so an answer can neither end the model's context
    early nor forge a turn. verl tokenizes the rendered text whole, control tokens included; an answer
    without one gets the same ids here."""

    _BASE = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    _MARK = "\ue000"  # a private-use character: repeated past its longest run in the text, it is a unique marker

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.base = tokenizer.apply_chat_template(self._BASE, tokenize=False, add_generation_prompt=False)
        special = sorted({t.content for t in tokenizer.added_tokens_decoder.values() if t.special}, key=len)
        # longest first, so a control token that contains another is found whole
        self.control = re.compile("|".join(re.escape(t) for t in reversed(special))) if special else None

    def tokens(self, texts: list[str]) -> list[int]:
        texts = [valid_text(text) for text in texts]
        texts, found, mark = self._hide(texts)
        messages = [*self._BASE, *({"role": "tool", "content": text} for text in texts)]
        full = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        if not full.startswith(self.base):
            raise ValueError("the chat template renders a conversation differently once a tool message follows")
        delta = full[len(self.base) :]
        if not found:
            return self.tokenizer(delta, add_special_tokens=False)["input_ids"]
        pieces = re.split(f"{mark}(\\d+){mark}", delta)  # text, index of a hidden control token, text, ...
        plain = self.tokenizer(pieces[::2], add_special_tokens=False)["input_ids"]
        as_text = self.tokenizer(found, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids = list(plain[0])
        for index, after in zip(pieces[1::2], plain[1:], strict=True):
            ids += as_text[int(index)]
            ids += after
        return ids

    def _hide(self, texts: list[str]) -> tuple[list[str], list[str], str]:
        """``texts`` with each control token replaced by a marker holding its index; the tokens; the marker."""
        if self.control is None or not any(self.control.search(text) for text in texts):
            return texts, [], ""
        seen = "".join([*texts, str(self.tokenizer.chat_template or "")])
        mark = self._MARK * (max((len(run) for run in re.findall(f"{self._MARK}+", seen)), default=0) + 1)
        found: list[str] = []

        def hide(match: re.Match) -> str:
            found.append(match.group(0))
            return f"{mark}{len(found) - 1}{mark}"

        return [self.control.sub(hide, text) for text in texts], found, mark


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
            if config.invalid_tool_calls == "drop":
                row.dropped += [call.error for call in calls if call.verl_drops]
                calls = [call for call in calls if not call.verl_drops]
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
                row.over_budget = True
                continue
            row.tokens += observation
            row.mask += [0] * len(observation)
            row.log_probs += [0.0] * len(observation)
            row.user_turns += 1
            live.append(r)
        live.sort()
    return rows


def warn_once(rows: list[Trajectory], budget: int, warned: set[str]) -> None:
    """The first time (per ``warned``) calls are dropped, and the first time trajectories end because their
    tools' answers do not fit in the response budget, one warning each (verl logs every dropped call and says
    nothing of the budget); the metrics count both every step."""
    dropped = [error for row in rows for error in row.dropped]
    if dropped and "dropped" not in warned:
        warned.add("dropped")
        log.warning(
            "multi-turn: %d tool call(s) dropped, as verl's hermes parser drops them (the first: %s); a turn left "
            "without calls ends its trajectory. tool/dropped_calls counts them each step "
            "(multi_turn.invalid_tool_calls: error_observation answers them instead; logged once)",
            len(dropped),
            dropped[0][:200],
        )
    ended = sum(row.over_budget for row in rows)
    if ended and "over_budget" not in warned:
        warned.add("over_budget")
        log.warning(
            "multi-turn: %d of %d trajectories ended because a tool's answer did not fit in the response budget of "
            "%d tokens (data.max_response_length, every turn counted), as verl ends them; tool/over_budget_ratio "
            "counts them each step (raise data.max_response_length or lower multi_turn.max_tool_response_length; "
            "logged once)",
            ended,
            len(rows),
            budget,
        )


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
    """Per tool: calls per trajectory, the share of calls that failed, mean seconds per call; over all: the
    same, the dropped calls per trajectory and the share of trajectories whose tool answers did not fit."""
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
        out["tool/dropped_calls"] = sum(len(row.dropped) for row in rows) / len(rows)
        out["tool/over_budget_ratio"] = sum(row.over_budget for row in rows) / len(rows)
    return out
