"""Model and tokenizer loading: the built-in tiny model, local HF directories, and the bad cases."""

from __future__ import annotations

import json
import logging
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlflow.assets import BIRD_SAMPLE
from rlflow.backends.local import models
from rlflow.data import tokenizer as tokenizers
from rlflow.errors import BackendError
from rlflow.schemas.pipeline import ModelSpec

ROOT = Path(__file__).resolve().parents[3]


def test_builtin_tokenizer_has_pad_eos_and_round_trips_sql_markers(tokenizer):
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.pad_token_id == 0
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.eos_token_id == 1
    text = "<think>count rows</think><answer>```sql\nSELECT COUNT(*) FROM singer WHERE age > 30\n```</answer>"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text
    for marker in ("<answer>", "</answer>", "```sql"):
        assert len(tokenizer(marker)["input_ids"]) == 1, marker
    # BPE merges make SQL compact: a whole query fits easily in a 64-token response
    assert len(ids) < len(text) / 3
    assert tokenizer.decode(ids + [tokenizer.eos_token_id, tokenizer.pad_token_id], skip_special_tokens=True) == text


def test_tokenizer_script_is_deterministic_and_reproduces_the_shipped_asset(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_tiny_tokenizer as script
    finally:
        sys.path.pop(0)
    corpus = script.builtin_corpus(random.Random(0)) + script.bird_corpus(BIRD_SAMPLE)
    first, second = script.train(corpus, 3072), script.train(corpus, 3072)
    assert first.to_str() == second.to_str()
    script.write(first, tmp_path)
    shipped = tokenizers.BUILTIN_TOKENIZERS["tiny-qwen2"]
    assert json.loads((tmp_path / "tokenizer.json").read_text()) == json.loads(
        (shipped / "tokenizer.json").read_text()
    ), "the shipped tokenizer is stale: re-run scripts/make_tiny_tokenizer.py"


def test_builtin_model_is_a_small_qwen2_initialised_from_the_seed(tokenizer):
    spec = ModelSpec()
    a = models.load_model(spec, tokenizer, seed=3)
    b = models.load_model(spec, tokenizer, seed=3)
    c = models.load_model(spec, tokenizer, seed=4)
    assert type(a).__name__ == "Qwen2ForCausalLM"
    assert 1_000_000 < sum(p.numel() for p in a.parameters()) < 10_000_000
    assert a.config.vocab_size >= len(tokenizer) and a.config.tie_word_embeddings
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not torch.equal(a.model.embed_tokens.weight, c.model.embed_tokens.weight)


def test_building_the_builtin_model_leaves_the_global_rng_alone(tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    models.load_model(ModelSpec(), tokenizer, seed=9)
    assert torch.equal(torch.rand(3), expected)


def test_unknown_builtin_lists_the_known_ones(tokenizer):
    with pytest.raises(BackendError, match="builtin:tiny-qwen2"):
        models.load_model(ModelSpec(path="builtin:huge"), tokenizer, seed=0)


def test_local_hf_directory_loads_relative_to_the_project_root(tmp_path, tokenizer):
    source = models.load_model(ModelSpec(), tokenizer, seed=2)
    source.save_pretrained(tmp_path / "ckpt" / "m")
    tokenizer.save_pretrained(tmp_path / "ckpt" / "m")
    spec = ModelSpec(path="ckpt/m")
    loaded = models.load_model(spec, tokenizers.load_tokenizer(spec, tmp_path), seed=0, root=tmp_path)
    assert all(torch.equal(x, y) for x, y in zip(source.state_dict().values(), loaded.state_dict().values()))


def test_missing_model_path_names_it(tmp_path, tokenizer):
    with pytest.raises(BackendError, match=r"does not exist.*builtin:tiny-qwen2") as err:
        models.load_model(ModelSpec(path="nowhere/model"), tokenizer, seed=0, root=tmp_path)
    assert str(tmp_path / "nowhere" / "model") in str(err.value)
    with pytest.raises(BackendError, match="does not exist"):
        tokenizers.load_tokenizer(ModelSpec(path="nowhere/model"), tmp_path)


def test_non_causal_lm_directory_is_refused_by_name(tmp_path, tokenizer):
    from transformers import ViTConfig

    ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64).save_pretrained(
        tmp_path
    )
    with pytest.raises(BackendError, match="not a causal language model") as err:
        models.load_model(ModelSpec(path=str(tmp_path)), tokenizer, seed=0)
    assert str(tmp_path) in str(err.value)


def test_directory_without_config_is_refused(tmp_path, tokenizer):
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(BackendError, match="not a Hugging Face model directory"):
        models.load_model(ModelSpec(path=str(tmp_path)), tokenizer, seed=0)


def test_tokenizer_without_pad_uses_eos_and_says_so_once(tmp_path, tokenizer, caplog):
    tokenizer.save_pretrained(tmp_path)
    config_path = tmp_path / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["pad_token"] = None
    config_path.write_text(json.dumps(config))
    spec = ModelSpec(path=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="rlflow.data"):
        first = tokenizers.load_tokenizer(spec)
        tokenizers.load_tokenizer(spec)
    assert first.pad_token_id == first.eos_token_id == tokenizer.eos_token_id
    assert sum("no pad token" in r.message for r in caplog.records) == 1


def test_build_prompt_batch_left_pads_with_the_pad_id(tokenizer):
    batch = models.build_prompt_batch(tokenizer, ["SELECT", "How many singers are there?"], 32)
    prompts, mask = batch["prompts"], batch["prompt_mask"]
    lengths = [len(tokenizer(t)["input_ids"]) for t in ["SELECT", "How many singers are there?"]]
    assert prompts.shape == (2, max(lengths))
    assert mask.sum(-1).tolist() == lengths
    assert mask[0, -1] == 1 and mask[0, 0] == 0  # left padding: real tokens at the right
    assert (prompts[mask == 0] == tokenizer.pad_token_id).all()
    assert tokenizer.decode(prompts[1][mask[1].bool()]) == "How many singers are there?"


def test_build_prompt_batch_refuses_a_too_long_prompt(tokenizer):
    with pytest.raises(BackendError, match="prompt 1 is .* over data.max_prompt_length=3"):
        models.build_prompt_batch(tokenizer, ["x", "How many singers are there?"], 3)


def test_load_tokenizer_does_not_import_torch_models_eagerly():
    code = (
        "import sys; from rlflow.data import tokenizer; "
        "assert 'transformers' not in sys.modules, 'transformers imported at module level'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_model_saved_from_the_builtin_keeps_its_tokenization(tmp_path, tokenizer):
    # config.json says qwen2, and AutoTokenizer alone would rebuild Qwen's pre-tokenizer
    models.load_model(ModelSpec(), tokenizer, seed=0).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = tokenizers.load_tokenizer(ModelSpec(path=str(tmp_path)))
    text = "How many singers are from France?\nSELECT COUNT(*) FROM singer WHERE country = 'France' AND age > 68"
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
