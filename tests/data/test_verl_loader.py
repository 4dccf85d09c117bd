"""data.format verl through load_split: chat templates, text prompts, reward_info, batches and truncation."""

from __future__ import annotations

import logging

import pytest
from data_helpers import pipeline, verl_row, write_rows

from rlflow.data import load_split
from rlflow.errors import DataError

ROWS = [
    verl_row("openai/gsm8k", "Natalia sold 48 clips in April. How many in May?", "72", index=0),
    verl_row("openai/gsm8k", "Weng earns $12 an hour. What did she earn?", "10", index=1),
    {
        **verl_row("lighteval/MATH", "What is 1+1?", "2", index=0),
        "prompt": [
            {"role": "system", "content": "Reason step by step."},
            {"role": "user", "content": "What is 1+1?"},
        ],
        "ability": "algebra",
    },
]


def load(folder, name: str, rows: list, tokenizer, split: str = "train", **data):
    write_rows(folder / name, rows)
    return load_split(pipeline(format="verl", train=name, **data), split, folder, tokenizer)


def test_chat_prompts_go_through_the_chat_template(tmp_path, chat_tokenizer):
    train = load(tmp_path, "train.parquet", ROWS, chat_tokenizer)
    assert len(train) == 3 and train.stats == {"loaded": 3, "dropped_too_long": 0, "truncated": 0}
    for example, row in zip(train.examples, ROWS, strict=True):
        rendered = chat_tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        assert example.prompt == rendered and rendered.endswith("<|im_start|>assistant\n")
        assert list(example.input_ids) == chat_tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert example.data_source == row["data_source"]
    assert train[2].prompt.startswith("<|im_start|>system\nReason step by step.<|im_end|>\n<|im_start|>user\n")


def test_reward_info_carries_ground_truth_extra_info_and_every_other_column(tmp_path, chat_tokenizer):
    rows = [
        {**ROWS[0], "difficulty": 3, "tags": ["x"]},
        {**ROWS[2], "difficulty": None, "extra_info": None, "tags": ["a", "b"]},
    ]
    train = load(tmp_path, "train.parquet", rows, chat_tokenizer)
    first, second = train[0].reward_info, train[1].reward_info
    assert first == {
        "ground_truth": "72",
        "extra_info": {"split": "train", "index": 0},
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "72"},
        "difficulty": 3,
        "tags": ["x"],
    }
    assert second["extra_info"] == {} and second["ability"] == "algebra" and second["difficulty"] is None
    assert type(second["tags"]) is list and type(first["extra_info"]["index"]) is int, "plain Python, no numpy"


@pytest.mark.parametrize("truth", [["2", "2.0"], 2, {"answer": 2, "unit": None}])
def test_ground_truth_may_be_any_json_value(tmp_path, chat_tokenizer, truth):
    row = {**ROWS[2], "reward_model": {"style": "rule", "ground_truth": truth}}
    train = load(tmp_path, "train.jsonl", [row], chat_tokenizer)
    assert train[0].reward_info["ground_truth"] == truth


def test_to_batch_keeps_each_rows_data_source_and_fields(tmp_path, chat_tokenizer):
    train = load(tmp_path, "train.parquet", ROWS, chat_tokenizer)
    batch = train.to_batch([2, 0], pad_id=chat_tokenizer.pad_token_id, step=1)
    assert batch["data_source"] == ["lighteval/MATH", "openai/gsm8k"]
    assert batch["raw_prompt"] == [train[2].prompt, train[0].prompt]
    assert [info["ground_truth"] for info in batch["reward_info"]] == ["2", "72"]
    batch["reward_info"][0]["extra_info"]["index"] = 99
    assert train[2].reward_info["extra_info"]["index"] == 0, "batches get copies of reward_info"


@pytest.mark.parametrize("name", ["train.jsonl", "train.json"])
def test_json_lines_and_json_lists_load_like_parquet(tmp_path, chat_tokenizer, name):
    parquet = load(tmp_path, "train.parquet", ROWS, chat_tokenizer)
    other = load(tmp_path, name, ROWS, chat_tokenizer)
    assert other.examples == parquet.examples


def test_a_json_file_may_hold_json_lines_as_datasets_writes_them(tmp_path, chat_tokenizer):
    write_rows(tmp_path / "rows.jsonl", ROWS)
    (tmp_path / "rows.jsonl").rename(tmp_path / "train.json")
    train = load_split(pipeline(format="verl", train="train.json"), "train", tmp_path, chat_tokenizer)
    assert [e.reward_info["ground_truth"] for e in train.examples] == ["72", "10", "2"]


def test_text_prompts_are_used_as_they_are_without_a_chat_template(tmp_path, tokenizer):
    rows = [{**ROWS[0], "prompt": "How many pets?"}, {**ROWS[1], "prompt": "Which pets are cats?"}]
    train = load(tmp_path, "train.jsonl", rows, tokenizer)
    assert [e.prompt for e in train.examples] == ["How many pets?", "Which pets are cats?"]
    assert list(train[0].input_ids) == tokenizer("How many pets?")["input_ids"]


def test_chat_prompts_with_a_tokenizer_without_a_chat_template_are_refused(tmp_path, tokenizer):
    rows = [{**ROWS[0], "prompt": "a text"}, ROWS[1]]
    with pytest.raises(DataError) as err:
        load(tmp_path, "train.jsonl", rows, tokenizer)
    message = str(err.value)
    assert str(tmp_path / "train.jsonl") in message and "row 1" in message
    assert "no chat_template" in message and "set model.tokenizer" in message and "plain texts" in message


def test_a_row_the_chat_template_refuses_is_named(tmp_path):
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    strict = load_tokenizer(ModelSpec())
    strict.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system turns') }}{% endif %}"
        "{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(DataError, match=r"train.parquet: row 2: the tokenizer's chat template .*no system turns"):
        load(tmp_path, "train.parquet", ROWS, strict)


@pytest.mark.parametrize("mode", ["drop", "left", "error"])
def test_over_long_prompts_follow_truncation(tmp_path, chat_tokenizer, mode, caplog):
    short = [{"role": "user", "content": "Hi"}]
    rows = [ROWS[0], {**ROWS[1], "prompt": short}]
    rendered = chat_tokenizer.apply_chat_template(short, add_generation_prompt=True, tokenize=False)
    limit = len(chat_tokenizer(rendered, add_special_tokens=False)["input_ids"])
    if mode == "error":
        with pytest.raises(DataError, match=f"train.parquet: row 0: prompt is .* over data.max_prompt_length={limit}"):
            load(tmp_path, "train.parquet", rows, chat_tokenizer, max_prompt_length=limit, truncation=mode)
        return
    with caplog.at_level(logging.WARNING, logger="rlflow.data"):
        train = load(tmp_path, "train.parquet", rows, chat_tokenizer, max_prompt_length=limit, truncation=mode)
    if mode == "drop":
        assert [e.prompt for e in train.examples] == [rendered] and train.stats["dropped_too_long"] == 1
    else:
        full = chat_tokenizer(train[0].prompt, add_special_tokens=False)["input_ids"]
        assert len(train) == 2 and train.stats["truncated"] == 1
        assert list(train[0].input_ids) == full[-limit:], "left truncation keeps the tail (the generation prompt)"
    assert len([r for r in caplog.records if "max_prompt_length" in r.getMessage() or "longer" in r.getMessage()]) == 1


def test_max_samples_caps_the_split_and_val_loads(tmp_path, chat_tokenizer):
    write_rows(tmp_path / "val.parquet", ROWS[:1])
    train = load(tmp_path, "train.parquet", ROWS, chat_tokenizer, max_train_samples=2, val="val.parquet")
    assert len(train) == 2 and train.stats["loaded"] == 2
    spec = pipeline(format="verl", train="train.parquet", val="val.parquet")
    assert len(load_split(spec, "val", tmp_path, chat_tokenizer)) == 1


def test_verl_data_needs_no_databases(tmp_path, chat_tokenizer):
    """No databases folder anywhere: a verl split loads all the same."""
    assert not list(tmp_path.rglob("*databases*"))
    assert len(load(tmp_path, "train.parquet", ROWS, chat_tokenizer)) == 3
