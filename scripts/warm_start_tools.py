"""Supervised transcripts that call your own tools on your own data: ``make_warm_start.py --task tools``.

    python scripts/make_warm_start.py --task tools --pipeline pipelines/my_agent.yaml --out models/my-agent-warm
                                      [--steps 60] [--lr 5e-4] [--batch-size 8] [--set KEY=VALUE]

A model that never writes a tool call gives GRPO no tool turn to learn from. This builds the kind of
transcripts the BIRD agent's warm start is made from (``--task bird_agent``) for any pipeline whose
generate stage has an enabled ``multi_turn`` block:

- Each train row names its demonstration in ``extra_info["tool_calls"]``: the calls a good answer
  makes, ``[{"name": ..., "arguments": {...}}, ...]``, one per model turn. The answer after them is
  the row's reference, as the single-turn warm start reads it (``extra_info["answer"]`` for
  verl-format data). A row without ``tool_calls`` is trained to answer at once.
- Every call runs through the pipeline's own tools (its tool files in the tool process, with the
  row's ``tools_kwargs``), and its answer is appended through the chat template as the agent loop
  appends it (``ToolTurn``, cut to ``max_tool_response_length``). The loss covers the model's turns
  only; the tools' answers get none, as in GRPO. A demonstration call that fails is kept (the model
  reads the error a rollout would show) and counted in the record.
"""

from __future__ import annotations

import json
import logging

from rlflow.backends.agent_loop import ToolTurn, rows_tools_kwargs
from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.hermes import ToolCall
from rlflow.tools.runner import ToolRunner

log = logging.getLogger("make_warm_start")

Row = tuple[list[int], list[int], list[int]]  # prompt ids, target ids, 1 where the target is trained on


class DemoError(ValueError):
    """A train row whose demonstration cannot be used (named, with the fix)."""


def demo_calls(extra_info, row: int, most: int | None) -> list[dict]:
    """The row's ``extra_info["tool_calls"]``, checked: each ``{"name": str, "arguments": dict}``, at most ``most``."""
    calls = extra_info.get("tool_calls") if isinstance(extra_info, dict) else None
    if calls is None:
        return []
    shape = 'write extra_info.tool_calls as [{"name": "<tool>", "arguments": {...}}, ...]'
    if not isinstance(calls, list):
        raise DemoError(f"train row {row}: extra_info.tool_calls is a {type(calls).__name__}, not a list; {shape}")
    for i, call in enumerate(calls):
        ok = isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)
        if not ok or set(call) != {"name", "arguments"}:
            raise DemoError(f"train row {row}: extra_info.tool_calls[{i}] is {str(call)[:80]!r}; {shape}")
    if most is not None and len(calls) > most:
        raise DemoError(
            f"train row {row}: {len(calls)} tool calls, but the pipeline's multi_turn allows {most} tool turns "
            "before the answer (max_assistant_turns - 1, max_user_turns); shorten the demonstration or raise them"
        )
    return calls


def tool_rows(dataset, tokenizer, spec, root, answer_of) -> tuple[list[Row], dict]:
    """(a transcript per train example, figures: calls made, calls failed, rows over the response budget).

    ``answer_of(reward_info)``: the answer text after the calls (EOS is appended)."""
    stage = next(s for s in spec.stages if s.uses == "generate")
    config = MultiTurnConfig.model_validate(stage.with_.get("multi_turn") or {})
    if not (config.enable and config.has_tools):
        raise DemoError(f"stage {stage.name!r}: multi_turn is not enabled with a tool file; nothing to call")
    turns = None if config.max_assistant_turns is None else config.max_assistant_turns - 1  # the last one answers
    limits = [n for n in (turns, config.max_user_turns) if n is not None]
    most = min(limits) if limits else None
    plans = [demo_calls(e.reward_info["extra_info"], i, most) for i, e in enumerate(dataset.examples)]
    if not any(plans):
        raise DemoError("no train row has extra_info.tool_calls: nothing shows the model a call to make")
    observations = _run_calls(ToolRunner(config, root), plans, dataset)
    render, eos = ToolTurn(tokenizer).tokens, tokenizer.eos_token_id
    budget = spec.data.max_response_length
    rows, failed, over = [], 0, 0
    for i, (example, calls, seen) in enumerate(zip(dataset.examples, plans, observations, strict=True)):
        try:
            answer_text = answer_of(example.reward_info)
        except (KeyError, TypeError) as exc:
            raise DemoError(
                f"train row {i}: no reference answer ({exc} missing) to write after the calls; verl-format rows "
                "hold it in extra_info.answer"
            ) from exc
        target, trained = [], []
        for call, result in zip(calls, seen, strict=True):
            text = f"<tool_call>{json.dumps({'name': call['name'], 'arguments': call['arguments']})}</tool_call>"
            turn = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos]
            answer = render([result.text])
            target += turn + answer
            trained += [1] * len(turn) + [0] * len(answer)
            failed += result.error
        answer = tokenizer(answer_text, add_special_tokens=False)["input_ids"] + [eos]
        rows.append((list(example.input_ids), target + answer, trained + [1] * len(answer)))
        over += len(target) + len(answer) > budget
    made = sum(len(p) for p in plans)
    if failed:
        log.warning("%d of %d demonstration calls failed; the transcripts hold their errors", failed, made)
    if over:
        log.warning("%d transcripts are longer than data.max_response_length (%d): rollouts cut them", over, budget)
    return rows, {"demonstration_calls": made, "failed_calls": failed, "over_budget": over}


def _run_calls(runner: ToolRunner, plans: list[list[dict]], dataset) -> list[list]:
    """Each row's tool results, in order: the k-th calls of every row go to the tool process together."""
    kwargs = rows_tools_kwargs({"reward_info": [e.reward_info for e in dataset.examples]})
    results: list[list] = [[] for _ in plans]
    try:
        for k in range(max(len(p) for p in plans)):
            todo = [r for r, plan in enumerate(plans) if len(plan) > k]
            calls = [ToolCall(plans[r][k]["name"], json.dumps(plans[r][k]["arguments"])) for r in todo]
            for r, result in zip(todo, runner.call(calls, [kwargs[r] for r in todo]), strict=True):
                results[r].append(result)
    finally:
        runner.close()
    return results
