"""``export_pretrained``: a checkpoint's model as a directory that transformers (and vLLM) load as it is."""

from __future__ import annotations

import json

import torch
from local_helpers import make_pipeline, sharpen
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer, TokenizersBackend

from rlflow.assets import ASSETS
from rlflow.backends.local.checkpoint import export_pretrained
from rlflow.backends.local.local_engine import LocalEngine

WARM = ASSETS / "models" / "tiny-sql-warm"  # its config.json says bfloat16


def exported(tmp_path, model: dict):
    engine = LocalEngine(make_pipeline(model=model))
    sharpen(engine.model)
    engine.save_checkpoint(str(tmp_path / "ckpt"), 1)
    note = export_pretrained(tmp_path / "ckpt", tmp_path / "out", model["dtype"])
    return engine, tmp_path / "out", note


def test_a_bfloat16_model_comes_back_bfloat16_with_its_tied_weights_under_the_usual_name(tmp_path):
    engine, out, note = exported(tmp_path, {"path": "builtin:tiny-qwen2", "dtype": "bfloat16"})
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        keys = set(weights.keys())
        assert {weights.get_tensor(k).dtype for k in keys} == {torch.bfloat16}
    # vLLM skips lm_head.weight when embeddings are tied: the embedding must be there by its own name
    assert "model.embed_tokens.weight" in keys and "lm_head.weight" not in keys

    model = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    assert model.dtype == torch.bfloat16
    trained = engine.model.state_dict()
    assert all(torch.equal(tensor, trained[name]) for name, tensor in model.state_dict().items()), "bit for bit"
    # the tokenizer it was trained with comes back as it was; AutoTokenizer imposes Qwen2's on a qwen2 model,
    # which splits text its own way: the export says so
    tokenizer = TokenizersBackend.from_pretrained(str(out), local_files_only=True)
    assert tokenizer("SELECT name FROM")["input_ids"] == engine.tokenizer("SELECT name FROM")["input_ids"]
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert type(AutoTokenizer.from_pretrained(str(out), local_files_only=True)).__name__ == "Qwen2Tokenizer"
    assert note.startswith("AutoTokenizer loads this tokenizer as Qwen2Tokenizer") and "TokenizersBackend" in note


def test_the_config_tells_the_pipelines_dtype_not_the_source_models(tmp_path):
    assert json.loads((WARM / "config.json").read_text())["dtype"] == "bfloat16"
    _, out, _ = exported(tmp_path, {"path": str(WARM), "dtype": "float32"})
    assert json.loads((out / "config.json").read_text())["dtype"] == "float32"
    assert AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True).dtype == torch.float32
