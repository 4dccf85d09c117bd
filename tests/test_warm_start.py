"""The shipped warm starts (rlflow/assets/models/tiny-sql-warm, tiny-sql-agent, tiny-rank-warm) load and answer.

A smoke test of the artifact the default pipeline starts from: it must load with rlflow's own
model code, greedy-decode a ```sql fenced block (the format the reward extracts), and get some
train questions right when the pipeline's reward executes them. Its record must say it was
made from the train split alone, by the script that ships with it. Greedy decoding, a handful
of prompts: seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlflow.assets import ASSETS, BIRD_SAMPLE, WARM_START

ROOT = Path(__file__).resolve().parents[1]
WARM = WARM_START
PROMPTS = 16


@pytest.fixture(scope="module")
def warm():
    """(tokenizer, model, train split) loaded the way `rlflow run` loads them."""
    import torch

    from rlflow.backends.local.models import load_model
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    torch.set_num_threads(1)
    spec = ModelSpec(path=str(WARM))
    tokenizer = load_tokenizer(spec, ROOT)
    model = load_model(spec, tokenizer, seed=1, root=ROOT).eval()
    pipeline = load_pipeline(
        ROOT / "pipelines" / "bird_grpo.yaml", sets=[f"bird_root={BIRD_SAMPLE}", f"model_path={WARM}"]
    ).spec
    return tokenizer, model, load_split(pipeline, "train", ROOT, tokenizer)


def _greedy(tokenizer, model, dataset, indices: list[int], max_new_tokens: int = 64) -> list[str]:
    from rlflow.backends.local.generation import SamplingParams, sample

    batch = dataset.to_batch(indices, tokenizer.pad_token_id)
    params = SamplingParams(
        max_new_tokens=max_new_tokens,
        eos_token_ids=(tokenizer.eos_token_id,),
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    responses, mask = sample(model, batch["prompts"], batch["prompt_mask"], params)
    lengths = mask.sum(-1).tolist()
    return tokenizer.batch_decode([r[:n] for r, n in zip(responses.tolist(), lengths)], skip_special_tokens=True)


def test_the_default_projects_start_from_it():
    import yaml

    for project in (ROOT, ASSETS):  # the repository, and the starter project `rlflow init` copies
        model_path = yaml.safe_load((project / "rlflow.yaml").read_text())["vars"]["model_path"]
        assert (project / model_path).resolve() == WARM


def test_record_says_train_split_only():
    meta = json.loads((WARM / "warm_start.json").read_text())
    assert meta["base"] == "builtin:tiny-qwen2" and meta["trained_on"] == "train.json"
    train = json.loads((BIRD_SAMPLE / "train.json").read_text())
    dev = json.loads((BIRD_SAMPLE / "dev.json").read_text())
    assert set(meta["train_question_ids"]) <= {q["question_id"] for q in train}
    assert len(set(meta["train_question_ids"])) == meta["train_questions"] <= len(train)
    seen = {(q["db_id"], q["question"]) for q in train}
    assert not any((q["db_id"], q["question"]) in seen for q in dev)  # dev questions never reach the fine-tune
    assert sum(p.stat().st_size for p in WARM.iterdir()) < 12_000_000


def test_greedy_answers_are_fenced_sql_and_some_are_right(warm):
    from rlflow.stages.text2sql_reward import Text2SqlRewardConfig, _caches, score_row

    tokenizer, model, train = warm
    texts = _greedy(tokenizer, model, train, list(range(PROMPTS)))
    assert all(t.startswith("```sql\n") for t in texts), texts
    config, caches = Text2SqlRewardConfig(), _caches({})
    scores = [score_row(t, train[i].reward_info, config, caches)[1] for i, t in enumerate(texts)]
    assert sum(s["format_ok"] for s in scores) >= PROMPTS - 2
    assert sum(s["acc"] for s in scores) > 0, texts


def test_the_ranking_warm_start_answers_in_format_from_its_train_split():
    """The ranking task's warm start: made from the train split, answers "#### <number>", some of them right."""
    import re

    import torch

    from rlflow.assets import RANK_WARM_START
    from rlflow.backends.local.models import load_model
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    meta = json.loads((RANK_WARM_START / "warm_start.json").read_text())
    assert meta["task"] == "ranking" and meta["trained_on"] == "train.parquet"
    torch.set_num_threads(1)
    spec = ModelSpec(path=str(RANK_WARM_START))
    tokenizer = load_tokenizer(spec, ROOT)
    model = load_model(spec, tokenizer, seed=1, root=ROOT).eval()
    pipeline = load_pipeline(ROOT / "pipelines" / "ranking_grpo.yaml").spec
    train = load_split(pipeline, "train", ROOT, tokenizer)
    texts = _greedy(tokenizer, model, train, list(range(2 * PROMPTS)))
    assert all(re.fullmatch(r"#### \d+", t) for t in texts), texts
    right = [t == f"#### {train[i].reward_info['ground_truth']}" for i, t in enumerate(texts)]
    assert sum(right) > 0, texts


def test_the_agent_warm_start_calls_its_tool_first(warm):
    """The BIRD agent's warm start (builtin:tiny-sql-agent): made from the BIRD warm start on the train split,
    its first turn on a train question is a hermes call of the shipped SQL tool (the small model still
    miscounts the closing braces of some: those come back as parse errors, and GRPO has that to learn)."""
    import torch

    from rlflow.assets import AGENT_WARM_START
    from rlflow.backends.local.models import load_model
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.schemas.pipeline import ModelSpec
    from rlflow.tools.hermes import parse_tool_calls

    meta = json.loads((AGENT_WARM_START / "warm_start.json").read_text())
    assert meta["task"] == "bird_agent" and meta["trained_on"] == "train.json"
    assert Path(meta["base"]).name == "tiny-sql-warm"
    assert meta["greedy_acc"]["dev"]["num_turns"] > 2  # the tool is called on the dev questions too
    tokenizer = warm[0]
    torch.set_num_threads(1)
    model = load_model(ModelSpec(path=str(AGENT_WARM_START)), tokenizer, seed=1, root=ROOT).eval()
    pipeline = load_pipeline(ROOT / "pipelines" / "bird_grpo_agent.yaml").spec
    train = load_split(pipeline, "train", ROOT, tokenizer)
    texts = _greedy(tokenizer, model, train, list(range(PROMPTS)), pipeline.data.max_response_length)
    assert all(t.startswith('<tool_call>{"name": "run_sql", "arguments": {"sql": "') for t in texts), texts
    calls = [parse_tool_calls(t)[1] for t in texts]
    assert all(len(c) == 1 for c in calls)  # one call each, well-formed or answered with the parse error
    assert sum(c[0].name == "run_sql" and c[0].error is None for c in calls) >= PROMPTS // 4, texts


def _calculator_project(root: Path) -> Path:
    """A project of one's own: a @function_tool file, verl-format rows whose extra_info names the demonstration
    call, a reward function, and an agent pipeline on the built-in model; returns the pipeline."""
    (root / "tools").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "pipelines").mkdir()
    (root / "rlflow.yaml").write_text("runs_dir: runs\n")
    (root / "tools" / "calc.py").write_text((ROOT / "tests" / "tools" / "assets" / "function_tools.py").read_text())
    rows = [
        {
            "data_source": "calc",
            "prompt": [{"role": "user", "content": f"What is {a} times {b}? Call multiply, then answer after ####."}],
            "reward_model": {"style": "rule", "ground_truth": str(a * b)},
            "extra_info": {
                "answer": f"#### {a * b}",
                "tool_calls": [{"name": "multiply", "arguments": {"a": a, "b": b}}],
            },
        }
        for a, b in [(3, 4), (2, 5), (6, 7), (8, 3), (2, 2), (3, 9)]
    ]
    rows[1]["extra_info"].pop("tool_calls")  # a row that answers at once
    for name, part in (("train", rows[:4]), ("val", rows[4:])):
        (root / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    pipeline = root / "pipelines" / "agent.yaml"
    pipeline.write_text(
        "name: calc-agent\nmodel: {path: builtin:tiny-qwen2}\n"
        "data: {format: verl, train: data/train.jsonl, val: data/val.jsonl, max_prompt_length: 64, "
        "max_response_length: 128}\n"
        "algorithm: {adv_estimator: grpo, n: 2}\ntrainer: {train_batch_size: 4, ppo_mini_batch_size: 4}\n"
        "resources:\n  pool: {type: local, device: cpu}\nstages:\n"
        "  - {name: generate, uses: generate, on: pool,\n"
        "     with: {multi_turn: {enable: true, max_assistant_turns: 2, function_tool_path: tools/calc.py}}}\n"
        '  - {name: reward, uses: reward_function, on: pool, with: {function: "rlflow.reward.math_answer:compute_score"}}\n'
        "  - {name: old_log_prob, uses: old_log_prob, on: pool}\n"
        "  - {name: advantage, uses: grpo_advantage, on: driver}\n"
        "  - {name: update_actor, uses: update_actor, on: pool}\n"
        "  - {name: sync_weights, uses: sync_weights, on: pool}\n"
    )
    return pipeline


def test_transcripts_of_your_own_tools_run_them_and_train_on_the_models_turns_only(tmp_path, monkeypatch):
    from rlflow.backends.agent_loop import ToolTurn
    from rlflow.check import load_pipeline
    from rlflow.data import load_split
    from rlflow.data.tokenizer import load_tokenizer

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    from warm_start_tools import DemoError, demo_calls, tool_rows

    pipeline = _calculator_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    spec = load_pipeline(pipeline).spec
    tokenizer = load_tokenizer(spec.model, tmp_path)
    train = load_split(spec, "train", tmp_path, tokenizer)
    rows, figures = tool_rows(train, tokenizer, spec, tmp_path, lambda info: info["extra_info"]["answer"])
    assert figures == {"demonstration_calls": 3, "failed_calls": 0, "over_budget": 0}
    prompt, target, trained = rows[0]
    assert prompt == list(train.examples[0].input_ids)
    call = '<tool_call>{"name": "multiply", "arguments": {"a": 3, "b": 4}}</tool_call>'
    eos = [tokenizer.eos_token_id]
    turn = tokenizer(call, add_special_tokens=False)["input_ids"] + eos
    seen = ToolTurn(tokenizer).tokens(["12"])  # the tool's own answer, through the chat template
    answer = tokenizer("#### 12", add_special_tokens=False)["input_ids"] + eos
    assert target == turn + seen + answer
    assert trained == [1] * len(turn) + [0] * len(seen) + [1] * len(answer)
    assert rows[1][1] == tokenizer("#### 10", add_special_tokens=False)["input_ids"] + eos  # no calls: answers
    with pytest.raises(DemoError, match=r"train row 2: extra_info.tool_calls\[0\] is .*; write extra_info.tool_calls"):
        demo_calls({"tool_calls": [{"name": "multiply", "args": {}}]}, 2, 1)
    with pytest.raises(DemoError, match="2 tool calls, but the pipeline's multi_turn allows 1 tool turns"):
        demo_calls({"tool_calls": [{"name": "m", "arguments": {}}] * 2}, 0, 1)


def test_a_warm_start_for_your_own_tools_at_the_smallest_size(tmp_path):
    """scripts/make_warm_start.py --task tools, run as a user runs it from their project: two steps."""
    import subprocess
    import sys

    pipeline = _calculator_project(tmp_path / "project")
    command = [sys.executable, str(ROOT / "scripts" / "make_warm_start.py"), "--task", "tools"]
    command += ["--pipeline", str(pipeline.relative_to(tmp_path / "project")), "--out", "models/calc-warm"]
    done = subprocess.run(
        [*command, "--steps", "2", "--batch-size", "2"], cwd=tmp_path / "project", capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "project" / "models" / "calc-warm"
    meta = json.loads((out / "warm_start.json").read_text())
    assert meta["task"] == "tools" and meta["base"] == "builtin:tiny-qwen2" and meta["steps"] == 2
    assert meta["demonstration_calls"] == 3 and meta["failed_calls"] == 0
    for split in ("train", "dev"):
        assert {"score", "num_turns", "tool_calls", "tool_error_ratio"} <= set(meta["greedy_acc"][split])
    assert (out / "config.json").exists() and (out / "tokenizer_config.json").exists()
