"""``rlflow export`` on a real run: the directory transformers loads and generates with, in the run's dtype;
``--model critic``: a PPO run's value model, which transformers loads as a token classifier."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from cli_helpers import REPO, rlflow
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer, TokenizersBackend


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


def _damaged_copy(run, tmp_path, name: str, damage) -> Path:
    copy = tmp_path / name
    shutil.copytree(run, copy)
    damage(copy / "checkpoints" / "step_2")
    return copy


def _truncate(file: Path, keep: int) -> None:
    with open(file, "r+b") as fh:
        fh.truncate(keep)


DAMAGES = {
    "truncated weights": (
        lambda c: _truncate(c / "rank_0" / "model" / "model.safetensors", 100_000),
        "rank_0/model/model.safetensors: not a complete safetensors file (",
    ),
    "weights cut to nothing": (
        lambda c: _truncate(c / "rank_0" / "model" / "model.safetensors", 0),
        "rank_0/model/model.safetensors: not a complete safetensors file (",
    ),
    "broken trainer state": (
        lambda c: (c / "trainer_state.json").write_text("{"),
        "step_2/trainer_state.json: not a trainer state: JSON with a global_step (",
    ),
    "broken model config": (
        lambda c: (c / "rank_0" / "model" / "config.json").write_text("garbage"),
        "rank_0/model: cannot load the model (",
    ),
    "alias bomb as pipeline": (
        lambda c: (c / "pipeline.resolved.yaml").write_text(
            "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
            "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
        ),
        "step_2/pipeline.resolved.yaml:",
    ),
}


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_a_damaged_checkpoint_is_one_line_naming_the_file(checkpointed_run, tmp_path, case):
    damage, expected = DAMAGES[case]
    run = _damaged_copy(checkpointed_run, tmp_path, "run", damage)
    result = rlflow("export", str(run), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {run}/checkpoints/") and expected in last, last
    assert "the checkpoint is damaged: export another step (--step N)" in last
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*")), "nothing half-written"


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> Path:
    """Two steps of pipelines/ranking_ppo.yaml (its critic on a pool of its own) at small sizes, trained in this
    process, with the critic in float32 beside a bfloat16 policy; a checkpoint at step 2."""
    from runtime_helpers import train_in_process

    run_dir = tmp_path_factory.mktemp("ppo") / "run"
    sets = [
        "trainer.train_batch_size=4",
        "trainer.ppo_mini_batch_size=2",
        "trainer.ppo_micro_batch_size_per_gpu=2",
        "data.max_response_length=8",
        "model.dtype=bfloat16",
        "critic.model.dtype=float32",
        "trainer.total_steps=2",
        "trainer.save_freq=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    ]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train_in_process(REPO / "pipelines" / "ranking_ppo.yaml", sets, run_dir)
    finally:
        torch.set_num_threads(threads)
    return run_dir


def test_the_critic_exports_and_gives_the_checkpointed_values(ppo_run, tmp_path):
    from rlflow.backends.local.local_engine import LocalEngine
    from rlflow.backends.local.models import build_prompt_batch
    from rlflow.schemas.pipeline import Pipeline

    out = tmp_path / "critic"
    result = rlflow("export", str(ppo_run), "--model", "critic", "-o", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[-1] == f"exported the critic of step 2 of {ppo_run} (float32) to {out}"
    model = AutoModelForTokenClassification.from_pretrained(str(out), local_files_only=True).eval()
    assert model.dtype == torch.float32 and model.config.num_labels == 1

    # the checkpoint's critic, loaded by the engine that trains it, scores a rollout as the export does
    checkpoint = ppo_run / "checkpoints" / "step_2"
    spec = Pipeline.model_validate(yaml.safe_load((checkpoint / "pipeline.resolved.yaml").read_text()))
    engine = LocalEngine(spec, roles=frozenset({"rollout", "critic"}), project_root=REPO)
    engine.load_checkpoint(str(checkpoint))
    batch = build_prompt_batch(engine.tokenizer, ["Which number is the largest: 3, 9, 4?", "5, 1"], 32)
    batch = batch.repeat_interleave(2)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "do_sample": True, "max_response_length": 8, "seed": 1}
    batch.update(engine.generate(batch, params))
    checkpointed = engine.compute_values(batch, {})["values"]
    tokenizer = TokenizersBackend.from_pretrained(str(out))
    assert tokenizer.get_vocab() == engine.tokenizer.get_vocab()
    with torch.no_grad():
        ids = torch.cat([batch["prompts"], batch["responses"]], dim=1)
        mask = torch.cat([batch["prompt_mask"], batch["response_mask"]], dim=1)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        head = model(input_ids=ids, attention_mask=mask, position_ids=position_ids).logits[..., 0]
    width = batch["responses"].shape[1]
    exported = head[:, -width - 1 : -1] * batch["response_mask"]  # verl's slice: the position before each token
    torch.testing.assert_close(exported, checkpointed, atol=1e-5, rtol=1e-5)
    assert checkpointed.abs().sum() > 0


def test_a_run_without_a_critic_or_an_unknown_model_is_one_line(checkpointed_run, tmp_path):
    result = rlflow("export", str(checkpointed_run), "--model", "critic", "-o", str(tmp_path / "critic"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {checkpointed_run}: this run trained no critic (")
    assert "--model policy" in last and "adv_estimator: gae" in last
    unknown = rlflow("export", str(checkpointed_run), "--model", "value", "-o", str(tmp_path / "value"))
    assert unknown.returncode == 2
    assert (
        unknown.stderr.strip().splitlines()[-1]
        == "error: --model 'value': not a model a run trains; use one of policy, critic"
    )
    assert not (tmp_path / "critic").exists() and not (tmp_path / "value").exists()
