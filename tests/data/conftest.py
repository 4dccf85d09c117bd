"""Fixtures for the data tests: offline tokenizers (with and without a chat template) and a BIRD-layout folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from data_helpers import SAMPLE, bird_record, make_db


@pytest.fixture(scope="session")
def tokenizer():
    """A byte-level BPE trained on the shipped sample's questions and SQL, wrapped for transformers (no chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = [r["question"] + "\n" + r["SQL"] for r in json.loads((SAMPLE / "train.json").read_text())]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<pad>", "<eos>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


@pytest.fixture(scope="session")
def chat_tokenizer():
    """The built-in models' tokenizer, which has a ChatML chat template."""
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    return load_tokenizer(ModelSpec())


@pytest.fixture
def bird_dir(tmp_path: Path) -> Path:
    """A BIRD-layout folder: train.json, dev.json, databases/<db>/<db>.sqlite for 'zoo' and 'farm'."""
    root = tmp_path / "bird"
    for db_id in ("zoo", "farm"):
        make_db(root / "databases" / db_id / f"{db_id}.sqlite")
    train = [bird_record("zoo", "How many pets?", "SELECT COUNT(*) FROM pet", question_id=i) for i in range(3)]
    train.append(
        bird_record(
            "farm",
            "Which pets are cats?",
            "SELECT name FROM pet WHERE kind = 'cat'",
            evidence="cat refers to kind = 'cat'",
            question_id=3,
        )
    )
    dev = [bird_record("farm", "How many dogs?", "SELECT COUNT(*) FROM pet WHERE kind = 'dog'")]
    (root / "train.json").write_text(json.dumps(train))
    (root / "dev.json").write_text(json.dumps(dev))
    return root
