"""Multi-turn generate on the tiny model, in-process, with a real verl tool in its own process.

The tiny model is first taught one transcript (a few dozen steps of plain next-token loss:
ask the ``add`` tool, read its answer, answer with it), so that greedy decoding calls the tool
and then answers. The engine must then produce that transcript through the agent loop: the
call parsed, the tool run (``tests/tools/assets``), its answer appended through the chat template
and masked out, the answer written; and log-probs, masks and ``num_turns`` as verl's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from local_helpers import make_pipeline

from rlflow.backends.agent_loop import ToolTurn
from rlflow.backends.local.local_engine import LocalEngine
from rlflow.backends.local.logprob import batch_log_probs
from rlflow.batch import Batch

ASSETS = Path(__file__).resolve().parents[2] / "tools" / "assets"  # the verl tools of tests/tools
CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
ANSWER = "The answer is 103"
PROMPT = "<|im_start|>user\nWhat is 1 plus 2 plus 100?<|im_end|>\n<|im_start|>assistant\n"


def teach(engine: LocalEngine, prompt: list[int], continuation: list[int], steps: int = 200) -> None:
    """Plain next-token loss on ``continuation`` after ``prompt`` until the model reproduces it greedily."""
    model = engine.model
    ids = torch.tensor([prompt + continuation])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits, ids[0, len(prompt) :])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    model.eval()


@pytest.fixture(scope="module")
def engine():
    pipeline = make_pipeline(data={"max_response_length": 96})
    engine = LocalEngine(pipeline, project_root=ASSETS)
    tok = engine.tokenizer
    eos = [tok.eos_token_id]
    prompt = tok(PROMPT, add_special_tokens=False)["input_ids"]
    call = tok(CALL, add_special_tokens=False)["input_ids"] + eos
    observation = ToolTurn(tok).tokens(["103"])
    answer = tok(ANSWER, add_special_tokens=False)["input_ids"] + eos
    torch.manual_seed(0)
    teach(engine, prompt, call + observation + answer)
    engine.expected = (prompt, call, observation, answer)
    yield engine
    engine.close()


def params(**multi_turn) -> dict:
    turns = {"enable": True, "tool_config_path": "tools.yaml", **multi_turn}
    return {"do_sample": False, "max_response_length": 96, "seed": 1, "multi_turn": turns}


def prompt_batch(prompt: list[int], rows: int = 2) -> Batch:
    ids = torch.tensor([prompt] * rows)
    return Batch({"prompts": ids, "prompt_mask": torch.ones_like(ids)})


def test_the_model_calls_the_tool_reads_its_answer_and_answers(engine):
    prompt, call, observation, answer = engine.expected
    out = engine.generate(prompt_batch(prompt), params())
    n = len(call) + len(observation) + len(answer)
    for row in range(2):
        assert out["responses"][row, :n].tolist() == call + observation + answer
        assert out["response_mask"][row].tolist() == [1] * len(call) + [0] * len(observation) + [1] * len(answer) + [
            0
        ] * (96 - n)
    assert out["num_turns"].tolist() == [4, 4]  # verl's count: 2 assistant turns + 1 tool turn + 1
    assert "The answer is 103" in out["response_text"][0] and "103" in out["response_text"][0]
    assert out.metrics["tool/add/calls"] == 1.0 and out.metrics["tool/add/error_ratio"] == 0.0
    # the rollout's log-probs are the model's on its own tokens (greedy: the raw logits) and 0 on tool tokens
    rows = prompt_batch(prompt)
    rows.update(Batch({k: out[k] for k in ("responses", "response_mask")}))
    actor, _ = batch_log_probs(engine.model, rows, micro_batch_size=None, temperature=1.0, with_entropy=False)
    mask = out["response_mask"].bool()
    assert (out["rollout_log_probs"][~mask] == 0).all()
    assert torch.allclose(out["rollout_log_probs"][mask], actor[mask], atol=1e-4)


def test_turn_limit_and_a_disabled_block(engine):
    prompt, call, _, _ = engine.expected
    out = engine.generate(prompt_batch(prompt, 1), params(max_assistant_turns=1))
    assert out["num_turns"].tolist() == [2] and out["response_mask"][0].sum() == len(call)
    single = engine.generate(prompt_batch(prompt, 1), {**params(), "multi_turn": {"enable": False}})
    assert "num_turns" not in single and single["responses"][0, : len(call)].tolist() == call
