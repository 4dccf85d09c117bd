"""``export_pretrained``: a checkpoint's model as a directory that transformers (and vLLM) load as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
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


DEEPSPEED_EXPORT = """
import json, sys, torch
sys.path.insert(0, {here!r})
from deepspeed_worker import make_pipeline, one_update, make_batch
from transformers import AutoModelForCausalLM
from rlflow.backends.local.checkpoint import export_pretrained
from rlflow.backends.local.factory import create_local_engine
from rlflow.check.engines import engine_choice

torch.set_num_threads(1)
pipeline = make_pipeline("deepspeed", 2)
engine = create_local_engine(pipeline, engine_choice(pipeline), device="cpu")
try:
    initial = {{k: t.clone() for k, t in engine.model.state_dict().items()}}
    one_update(engine, make_batch(engine.tokenizer), 1)
    engine.save_checkpoint({ckpt!r}, 1)
    export_pretrained({ckpt!r}, {out!r}, "float32")
    trained = engine.deepspeed.dense_state_dict()
    exported = AutoModelForCausalLM.from_pretrained({out!r}).state_dict()
    moved = any(not torch.equal(t, initial[k]) for k, t in trained.items())
    print(json.dumps({{"equal": all(torch.equal(exported[k], t) for k, t in trained.items()), "moved": moved}}))
finally:
    engine.close()
"""


def test_a_deepspeed_checkpoint_exports_the_weights_deepspeed_trained(tmp_path):
    pytest.importorskip("deepspeed")
    here = str(Path(__file__).parent)
    code = DEEPSPEED_EXPORT.format(here=here, ckpt=str(tmp_path / "ckpt"), out=str(tmp_path / "out"))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"equal": True, "moved": True}
    assert (tmp_path / "ckpt" / "deepspeed").is_dir(), "DeepSpeed's own state lies beside the model"
