"""The shipped warm start (models/tiny-sql-warm) loads through rlflow and answers train questions.

A smoke test of the artifact the default pipeline starts from: it must load with rlflow's own
model code, greedy-decode a ```sql fenced block for a train prompt (the format the reward
extracts), and get some train questions right when executed. It also checks the record of how
it was made says it saw only the train split. Greedy decoding, a handful of prompts: seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WARM = ROOT / "models" / "tiny-sql-warm"
PROMPTS = 16


@pytest.fixture(scope="module")
def warm():
    """(tokenizer, model, first PROMPTS train examples) loaded the way `rlflow run` loads them."""
    import torch

    from rlflow.backends.local.models import load_model, load_tokenizer
    from rlflow.data import load_split
    from rlflow.schemas.loader import load_pipeline
    from rlflow.schemas.pipeline import ModelSpec

    torch.set_num_threads(1)
    spec = ModelSpec(path=str(WARM))
    tokenizer = load_tokenizer(spec, ROOT)
    model = load_model(spec, tokenizer, seed=1, root=ROOT)
    pipeline = load_pipeline(ROOT / "pipelines" / "bird_grpo.yaml",
                             sets=["bird_root=data/bird_sample", f"model_path={WARM}"]).spec
    train = load_split(pipeline, "train", ROOT, tokenizer)
    return tokenizer, model, train


def _greedy(tokenizer, model, dataset, indices: list[int]) -> list[str]:
    from rlflow.backends.local.generation import SamplingParams, sample

    batch = dataset.to_batch(indices, tokenizer.pad_token_id)
    params = SamplingParams(max_new_tokens=64, eos_token_ids=(tokenizer.eos_token_id,),
                            pad_token_id=tokenizer.pad_token_id, do_sample=False)
    responses, mask = sample(model, batch["prompts"], batch["prompt_mask"], params)
    lengths = mask.sum(-1).tolist()
    return tokenizer.batch_decode([r[:n] for r, n in zip(responses.tolist(), lengths)], skip_special_tokens=True)


def test_record_says_train_split_only():
    meta = json.loads((WARM / "warm_start.json").read_text())
    assert meta["trained_on"] == "train.json"
    assert meta["base"] == "builtin:tiny-qwen2"
    assert sum(p.stat().st_size for p in WARM.iterdir()) < 20_000_000


def test_greedy_answer_is_a_fenced_sql_block(warm):
    from rlflow.reward.extract import fenced

    tokenizer, model, train = warm
    [text] = _greedy(tokenizer, model, train, [0])
    assert text.startswith("```sql\n"), text
    sql = fenced(text)
    assert sql is not None and sql.upper().startswith("SELECT"), text


def test_some_train_questions_execute_correctly(warm):
    from rlflow.reward.extract import extract_sql
    from rlflow.reward.sql_exec import connect_readonly, execute

    tokenizer, model, train = warm
    texts = _greedy(tokenizer, model, train, list(range(PROMPTS)))
    correct = 0
    for text, example in zip(texts, train.examples[:PROMPTS], strict=True):
        info = example.reward_info
        conn = connect_readonly(info["db_path"])
        try:
            gold = execute(conn, info["gold_sql"], 5.0, 10000)
            sql = extract_sql(text, "fenced")
            pred = execute(conn, sql, 5.0, 10000) if sql else None
        finally:
            conn.close()
        correct += bool(pred is not None and pred.ok and gold.ok and pred.rows == gold.rows)
    assert correct > 0, texts
