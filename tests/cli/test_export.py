"""``rlflow export`` on a real run: the directory transformers loads and generates with, in the run's dtype."""

from __future__ import annotations

import json

import torch
from cli_helpers import rlflow
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, TokenizersBackend


def test_the_latest_checkpoint_exports_and_generates_in_bfloat16(checkpointed_run, tmp_path):
    out = tmp_path / "model"
    result = rlflow("export", str(checkpointed_run), "-o", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    # (the last line: with DeepSpeed installed, importing transformers' integrations prints a line of its own)
    assert result.stdout.splitlines()[-1] == f"exported step 2 of {checkpointed_run} (bfloat16) to {out}"
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"

    model = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    assert model.dtype == torch.bfloat16
    trained = load_file(str(checkpointed_run / "checkpoints" / "step_2" / "rank_0" / "model" / "model.safetensors"))
    exported = model.state_dict()
    assert all(torch.equal(exported[name], tensor) for name, tensor in trained.items()), "the step-2 weights"

    # the tokenizer it was trained with (the export's note says AutoTokenizer picks Qwen2's for a qwen2 model)
    assert "note: AutoTokenizer loads this tokenizer as Qwen2Tokenizer" in result.stderr
    for tokenizer in (TokenizersBackend.from_pretrained(str(out)), AutoTokenizer.from_pretrained(str(out))):
        prompt = tokenizer("What is 47 + 8?", return_tensors="pt")
        generated = model.generate(**prompt, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
        assert generated.shape[1] > prompt["input_ids"].shape[1]
        assert isinstance(tokenizer.decode(generated[0, prompt["input_ids"].shape[1] :]), str)


def test_a_step_is_chosen_and_mistakes_are_one_line_with_exit_2(checkpointed_run, tmp_path):
    first = rlflow("export", str(checkpointed_run), "--step", "1", "-o", str(tmp_path / "one"))
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.splitlines()[-1].startswith("exported step 1 of")
    again = rlflow("export", str(checkpointed_run), "-o", str(tmp_path / "one"))
    assert again.returncode == 2 and again.stderr.strip().endswith(
        "is not empty; give a new or empty folder to export to (nothing is overwritten)"
    )
    missing = rlflow("export", str(checkpointed_run), "--step", "5", "-o", str(tmp_path / "five"))
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        f"error: {checkpointed_run}: no checkpoint of step 5; steps with a checkpoint: 1, 2 (--step N)"
    )
    assert not (tmp_path / "five").exists()
