"""The driver's prompt tokenizer: the same ids, pad id and chat prompts as transformers' tokenizer, without
importing transformers for a plain tokenizers file, and transformers' own tokenizer for anything else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from data_helpers import REPO, SAMPLE

from rlflow.assets import ASSETS
from rlflow.data import load_split
from rlflow.data.tokenizer import PromptTokenizer, load_prompt_tokenizer, load_tokenizer
from rlflow.errors import BackendError
from rlflow.schemas.pipeline import ModelSpec, Pipeline

SOURCES = ("builtin:tiny-qwen2", str(ASSETS / "models" / "tiny-sql-warm"), str(ASSETS / "models" / "tiny-rank-warm"))


@pytest.mark.parametrize("source", SOURCES)
def test_prompt_ids_match_transformers_on_the_shipped_prompts(source):
    spec = ModelSpec(path=source)
    light, full = load_prompt_tokenizer(spec), load_tokenizer(spec)
    assert isinstance(light, PromptTokenizer)
    pipeline = Pipeline.model_validate(
        {"name": "t", "data": {"format": "bird", "train": str(SAMPLE / "train.json")}, "stages": []}
    )
    prompts = [e.prompt for e in load_split(pipeline, "train", REPO, light).examples]
    for special in (True, False):
        assert (
            light(prompts, add_special_tokens=special)["input_ids"]
            == full(prompts, add_special_tokens=special)["input_ids"]
        )
    assert light.pad_token_id == full.pad_token_id and light.eos_token == full.eos_token
    messages = [{"role": "user", "content": "What is 2+3?"}]
    rendered = full.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert light.chat_template and light.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == (
        rendered
    )


def test_loading_the_prompt_tokenizer_imports_neither_transformers_nor_torch():
    code = (
        "import sys\n"
        "from rlflow.data.tokenizer import load_prompt_tokenizer\n"
        "from rlflow.schemas.pipeline import ModelSpec\n"
        "t = load_prompt_tokenizer(ModelSpec(path='rlflow/assets/models/tiny-sql-warm'))\n"
        "t(['SELECT 1'])\n"
        "print(sorted(m for m in ('transformers', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_config_asking_more_of_transformers_gets_transformers_tokenizer(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ASSETS / "models" / "tiny-sql-warm", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": True}))
    assert not isinstance(load_prompt_tokenizer(ModelSpec(path=str(model))), PromptTokenizer)


def test_a_special_token_missing_from_the_vocabulary_gets_transformers_tokenizer(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ASSETS / "models" / "tiny-sql-warm", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "extra_special_tokens": ["<|new|>"]}))
    assert not isinstance(load_prompt_tokenizer(ModelSpec(path=str(model))), PromptTokenizer)


def test_without_a_pad_token_eos_pads_as_with_transformers(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ASSETS / "models" / "tiny-sql-warm", model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "pad_token": None}))
    spec = ModelSpec(path=str(model))
    light = load_prompt_tokenizer(spec)
    assert isinstance(light, PromptTokenizer) and light.pad_token_id == load_tokenizer(spec).pad_token_id


@pytest.mark.timeout(60)
def test_a_fifo_as_the_chat_template_is_refused_not_waited_on(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(ASSETS / "models" / "tiny-sql-warm", model)
    (model / "chat_template.jinja").unlink()
    os.mkfifo(model / "chat_template.jinja")
    with pytest.raises(BackendError, match=r"model.path: cannot read .*chat_template.jinja: a FIFO"):
        load_prompt_tokenizer(ModelSpec(path=str(model)))
