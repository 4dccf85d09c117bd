"""load_split and PromptDataset: the shipped sample, real BIRD layout, formats, and bad input."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from data_helpers import REPO, SAMPLE, bird_record, make_db, pipeline

from rlflow.data import PromptDataset, load_split
from rlflow.errors import DataError


def sample_spec(**overrides):
    data = {
        "train": "rlflow/assets/data/bird_sample/train.json",
        "val": "rlflow/assets/data/bird_sample/dev.json",
        "databases": "rlflow/assets/data/bird_sample/databases",
        **overrides,
    }
    return pipeline(**data)


def test_shipped_sample_loads_every_question(tokenizer):
    train = load_split(sample_spec(), "train", REPO, tokenizer)
    val = load_split(sample_spec(), "val", REPO, tokenizer)
    records = json.loads((SAMPLE / "train.json").read_text())
    assert isinstance(train, PromptDataset) and len(train) == len(records)
    assert len(val) == len(json.loads((SAMPLE / "dev.json").read_text()))
    assert train.stats == {
        "loaded": len(records),
        "skipped_missing_db": 0,
        "dropped_bad_gold": 0,
        "dropped_too_long": 0,
        "truncated": 0,
    }
    first, record = train[0], records[0]
    assert record["question"] in first.prompt and "CREATE TABLE" in first.prompt and "```sql" in first.prompt
    info = first.reward_info
    assert set(info) == {"ground_truth", "extra_info"} and info["ground_truth"] == record["SQL"]
    assert set(info["extra_info"]) == {"db_path", "db_id", "question_id", "tools_kwargs"}
    assert info["extra_info"]["tools_kwargs"] == {
        "run_sql": {"create_kwargs": {"db_path": info["extra_info"]["db_path"]}}
    }
    db_path = Path(info["extra_info"]["db_path"])
    assert db_path.is_absolute() and db_path.is_file()
    assert info["extra_info"]["db_id"] == record["db_id"] and info["extra_info"]["question_id"] == record["question_id"]
    assert first.data_source == "bird"
    assert list(first.input_ids) == tokenizer(first.prompt)["input_ids"]


def test_evidence_appears_only_when_given(tokenizer):
    train = load_split(sample_spec(), "train", REPO, tokenizer)
    records = json.loads((SAMPLE / "train.json").read_text())
    with_evidence = next(i for i, r in enumerate(records) if r["evidence"])
    without = next(i for i, r in enumerate(records) if not r["evidence"])
    assert records[with_evidence]["evidence"] in train[with_evidence].prompt
    assert "Evidence" not in train[without].prompt


def test_to_batch_left_pads_and_tags_rows(tokenizer):
    train = load_split(sample_spec(), "train", REPO, tokenizer)
    lengths = [len(e.input_ids) for e in train.examples]
    short, long_ = lengths.index(min(lengths)), lengths.index(max(lengths))
    batch = train.to_batch([short, long_], pad_id=tokenizer.pad_token_id, step=4)
    prompts, mask = batch["prompts"], batch["prompt_mask"]
    assert prompts.dtype == torch.long and prompts.shape == (2, max(lengths)) == mask.shape
    assert mask.sum(dim=1).tolist() == [min(lengths), max(lengths)]
    assert mask[:, -1].tolist() == [1, 1], "left padding: the last column is real tokens"
    pad = max(lengths) - min(lengths)
    assert prompts[0, :pad].tolist() == [tokenizer.pad_token_id] * pad
    assert prompts[0, pad:].tolist() == list(train[short].input_ids)
    assert batch["uid"] == [f"4-0-{short}", f"4-1-{long_}"]
    assert batch["raw_prompt"] == [train[short].prompt, train[long_].prompt]
    assert batch["data_source"] == ["bird", "bird"]
    batch["reward_info"][0]["ground_truth"] = "changed"
    batch["reward_info"][0]["extra_info"]["db_id"] = "changed"
    kept = train[short].reward_info
    assert "changed" not in (kept["ground_truth"], kept["extra_info"]["db_id"]), "batches get copies of reward_info"
    again = train.to_batch([short, long_], pad_id=tokenizer.pad_token_id, step=4)
    assert again["uid"] == batch["uid"] and torch.equal(again["prompts"], prompts)


def test_missing_val_split_is_none(tokenizer):
    assert load_split(sample_spec(val=None), "val", REPO, tokenizer) is None


def test_real_bird_layout_with_extra_keys_loads(bird_dir, tokenizer):
    spec = pipeline(train="bird/train.json", val="bird/dev.json")
    train = load_split(spec, "train", bird_dir.parent, tokenizer)
    val = load_split(spec, "val", bird_dir.parent, tokenizer)
    assert len(train) == 4 and len(val) == 1
    assert train[3].reward_info["extra_info"]["db_path"] == str(bird_dir / "databases" / "farm" / "farm.sqlite")
    assert "cat refers to kind = 'cat'" in train[3].prompt
    assert "CREATE TABLE pet" in val[0].prompt


def test_bird_split_databases_folders_are_found(tmp_path, tokenizer):
    """Real BIRD ships dev/dev.json next to dev/dev_databases/."""
    make_db(tmp_path / "dev" / "dev_databases" / "zoo" / "zoo.sqlite")
    record = bird_record("zoo", "How many?", "SELECT COUNT(*) FROM pet")
    (tmp_path / "dev" / "dev.json").write_text(json.dumps([record]))
    spec = pipeline(train="dev/dev.json")
    assert len(load_split(spec, "train", tmp_path, tokenizer)) == 1


def test_missing_database_is_skipped_counted_and_named_once(bird_dir, tokenizer, caplog):
    records = json.loads((bird_dir / "train.json").read_text())
    records += [bird_record("ghost", f"Q{i}?", "SELECT 1") for i in range(3)]
    (bird_dir / "train.json").write_text(json.dumps(records))
    with caplog.at_level(logging.WARNING, logger="rlflow.data"):
        train = load_split(pipeline(train="bird/train.json"), "train", bird_dir.parent, tokenizer)
    assert len(train) == 4 and train.stats["skipped_missing_db"] == 3
    naming = [r for r in caplog.records if "'ghost'" in r.getMessage()]
    assert len(naming) == 1, [r.getMessage() for r in caplog.records]


def test_failing_gold_sql_is_dropped_with_a_count(bird_dir, tokenizer, caplog):
    records = json.loads((bird_dir / "train.json").read_text())
    records += [
        bird_record("zoo", "Bad column?", "SELECT colour FROM pet"),
        bird_record("zoo", "Two statements?", "SELECT 1; SELECT 2"),
        bird_record("zoo", "A write?", "DELETE FROM pet"),
    ]
    (bird_dir / "train.json").write_text(json.dumps(records))
    with caplog.at_level(logging.WARNING, logger="rlflow.data"):
        train = load_split(pipeline(train="bird/train.json"), "train", bird_dir.parent, tokenizer)
    assert len(train) == 4 and train.stats["dropped_bad_gold"] == 3
    assert any("no such column: colour" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("mode", ["drop", "left", "error"])
def test_over_long_prompts_follow_truncation(bird_dir, tokenizer, mode, caplog):
    spec = pipeline(train="bird/train.json", max_prompt_length=8, truncation=mode)
    if mode == "error":
        with pytest.raises(DataError, match="max_prompt_length=8"):
            load_split(spec, "train", bird_dir.parent, tokenizer)
        return
    with caplog.at_level(logging.WARNING, logger="rlflow.data"):
        train = load_split(spec, "train", bird_dir.parent, tokenizer)
    if mode == "drop":
        assert len(train) == 0 and train.stats["dropped_too_long"] == 4
    else:
        full = tokenizer(train[0].prompt)["input_ids"]
        assert len(train) == 4 and train.stats["truncated"] == 4
        assert list(train[0].input_ids) == full[-8:], "left truncation keeps the tail (the question)"
    assert (
        len([r for r in caplog.records if "max_prompt_length" in r.getMessage() or "longer prompts" in r.getMessage()])
        == 1
    )


def test_jsonl_and_parquet_load_like_bird(bird_dir, tokenizer):
    records = json.loads((bird_dir / "train.json").read_text())
    records[0]["data_source"] = "zoo_set"
    (bird_dir / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    pq.write_table(pa.Table.from_pylist(records), bird_dir / "train.parquet")
    (bird_dir / "train.json").write_text(json.dumps(records))
    loaded = {
        fmt: load_split(pipeline(train=f"bird/train.{ext}", format=fmt), "train", bird_dir.parent, tokenizer)
        for fmt, ext in (("bird", "json"), ("jsonl", "jsonl"), ("parquet", "parquet"))
    }
    prompts = {fmt: [(e.prompt, e.input_ids, e.data_source) for e in ds.examples] for fmt, ds in loaded.items()}
    assert prompts["bird"] == prompts["jsonl"] == prompts["parquet"]
    assert prompts["bird"][0][2] == "zoo_set" and prompts["bird"][1][2] == "bird"


def test_max_samples_caps_the_split(tokenizer):
    train = load_split(sample_spec(max_train_samples=10), "train", REPO, tokenizer)
    assert len(train) == 10 and train.stats["loaded"] == 10


def test_prompt_template_override_and_its_errors(bird_dir, tokenizer):
    template = bird_dir / "mine.j2"
    spec = pipeline(train="bird/train.json", prompt_template="bird/mine.j2")
    template.write_text("[{{ db_id }}] {{ question }}")
    train = load_split(spec, "train", bird_dir.parent, tokenizer)
    assert train[0].prompt == "[zoo] How many pets?"
    template.write_text("{{ questoin }}")
    with pytest.raises(DataError, match="'questoin' is undefined.*schema, question"):
        load_split(spec, "train", bird_dir.parent, tokenizer)
    template.write_text("{% if %}")
    with pytest.raises(DataError, match="mine.j2:1: template syntax error"):
        load_split(spec, "train", bird_dir.parent, tokenizer)
    template.write_text("{{ question.__class__.__mro__ }}")
    with pytest.raises(DataError, match="sandbox"):
        load_split(spec, "train", bird_dir.parent, tokenizer)


@pytest.mark.parametrize("name, spec_field", [("train.jsonl", "train"), ("mine.j2", "prompt_template")])
def test_a_byte_that_is_not_utf8_is_named_with_its_line_and_offset(bird_dir, tokenizer, name, spec_field):
    records = json.loads((bird_dir / "train.json").read_text())
    (bird_dir / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (bird_dir / "mine.j2").write_text("Question:\n{{ question }}\n")
    path = bird_dir / name
    text = path.read_bytes()
    offset = text.index(b"\n") + 3  # on the second line
    path.write_bytes(text[:offset] + b"\xff" + text[offset:])
    spec = pipeline(**{"train": "bird/train.jsonl", "format": "jsonl", spec_field: f"bird/{name}"})
    with pytest.raises(DataError, match=f"{name}:2: byte 0xff at offset {offset} is not UTF-8.*save the file as UTF-8"):
        load_split(spec, "train", bird_dir.parent, tokenizer)


def test_malformed_records_are_all_named(bird_dir, tokenizer):
    (bird_dir / "train.json").write_text(
        json.dumps([{"db_id": "zoo", "question": "Q"}, "text", {"db_id": "zoo", "question": 3, "SQL": "SELECT 1"}])
    )
    with pytest.raises(DataError) as err:
        load_split(pipeline(train="bird/train.json"), "train", bird_dir.parent, tokenizer)
    message = str(err.value)
    assert "record 0 misses 'SQL'" in message and "record 1 is a str" in message
    assert "record 2 has non-text 'question'" in message


def test_db_id_must_be_a_plain_name(bird_dir, tokenizer):
    (bird_dir / "train.json").write_text(json.dumps([bird_record("../zoo", "Q?", "SELECT 1")]))
    with pytest.raises(DataError, match=r"record 0: db_id '\.\./zoo' is not a plain name"):
        load_split(pipeline(train="bird/train.json"), "train", bird_dir.parent, tokenizer)


@pytest.mark.parametrize(
    "field,value",
    [("val", "bird/../outside/dev.json"), ("databases", "bird/../../dbs"), ("train", "bird/../train.json")],
)
def test_paths_escaping_the_data_root_are_refused(bird_dir, tokenizer, field, value):
    data = {"train": "bird/train.json", "root": "bird", field: value}
    with pytest.raises(DataError, match=f"data.{field}: .* outside the data root"):
        load_split(pipeline(**data), "train", bird_dir.parent, tokenizer)


def test_loading_leaves_databases_untouched(bird_dir, tokenizer):
    def snapshot():
        return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(bird_dir.rglob("*")) if p.is_file()}

    before = snapshot()
    load_split(pipeline(train="bird/train.json", val="bird/dev.json"), "train", bird_dir.parent, tokenizer)
    assert snapshot() == before
