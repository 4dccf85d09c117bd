"""Per-rank checkpoints of the local engine: model, optimizer, scheduler, RNG, step.

Layout under the checkpoint directory the runtime hands in (it makes the directory atomic)::

    rank_<r>/model/            a Hugging Face directory: config.json, model.safetensors, tokenizer
    rank_<r>/trainer.pt        optimizer and lr-scheduler state (absent on a rollout-only engine)
    rank_<r>/rng.pt            torch (CPU and CUDA), numpy and python RNG states
    rank_<r>/meta.json         global step, rank, world size

Design decisions:
- Weights are safetensors written by ``safetensors.torch.save_model`` (tied embeddings are
  stored once) next to the model config and tokenizer, so ``rank_0/model`` is itself a valid
  ``model.path`` for evaluation or a new run.
- Everything else is written so that ``torch.load(weights_only=True)`` reads it back: RNG
  states are converted to tensors and lists (no pickled objects), so loading a checkpoint
  never executes code from it.
- Restoring is exact: float tensors round-trip bit for bit, and with the RNG states back
  a resumed CPU run continues identically to one that never stopped.
- ``export_pretrained`` turns rank 0's model into a directory for others (``rlflow export``):
  loaded and saved again by transformers, so the weights are in the pipeline's dtype, the
  config says that dtype, and tied weights are stored under the names every loader expects
  (``save_model`` keeps whichever tied name it meets first, and vLLM skips ``lm_head`` when
  embeddings are tied).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlflow.errors import BackendError

MODEL_DIR = "model"
WEIGHTS = "model.safetensors"


def rank_dir(path: str | Path, rank: int) -> Path:
    return Path(path) / f"rank_{rank}"


def model_dir(path: str | Path, rank: int = 0) -> Path:
    """The Hugging Face directory of ``rank``'s model in checkpoint ``path``."""
    return rank_dir(path, rank) / MODEL_DIR


def export_pretrained(path: str | Path, out: Path, dtype: str) -> str | None:
    """Write rank 0's model of checkpoint ``path`` (weights in ``dtype``, config, generation config,
    tokenizer) to ``out`` as a Hugging Face directory that transformers and vLLM load as it is.

    Returns a note when ``AutoTokenizer`` would load the tokenizer as another class than the one
    the model was trained with (a model type whose tokenizer class transformers imposes, with a
    tokenizer of its own: the built-in models), else None.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    src = model_dir(path)
    model = AutoModelForCausalLM.from_pretrained(str(src), dtype=getattr(torch, dtype), local_files_only=True)
    model.save_pretrained(str(out))
    tokenizer = load_tokenizer(ModelSpec(path=str(src)))  # as the run loaded it
    tokenizer.save_pretrained(str(out))
    auto = type(AutoTokenizer.from_pretrained(str(out), local_files_only=True))
    if auto is type(tokenizer):
        return None
    return (
        f"AutoTokenizer loads this tokenizer as {auto.__name__} (from the model type), which splits text "
        f"differently from the {type(tokenizer).__name__} it was trained with; load that one with "
        f"transformers.{type(tokenizer).__name__}.from_pretrained"
    )


def rng_state(device: torch.device) -> dict[str, Any]:
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "gauss": float(gauss),
        },
        "python": {"version": version, "internal": list(internal), "gauss": py_gauss},
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["internal"]), p["gauss"]))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def save(path: str | Path, rank: int, *, model, tokenizer, trainer_state: dict | None, meta: dict[str, Any]) -> Path:
    """Write this rank's part; returns its directory."""
    from safetensors.torch import save_model

    out = rank_dir(path, rank)
    target = out / MODEL_DIR
    target.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(target)
    model.generation_config.save_pretrained(target)
    save_model(model, str(target / WEIGHTS), metadata={"format": "pt"})
    tokenizer.save_pretrained(target)
    if trainer_state is not None:
        torch.save(trainer_state, out / "trainer.pt")
    device = next(model.parameters()).device
    torch.save(rng_state(device), out / "rng.pt")
    (out / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return out


def load(path: str | Path, rank: int, *, model, expect_trainer_state: bool) -> tuple[dict | None, dict[str, Any]]:
    """Restore the weights and RNG of this rank; returns (trainer state or None, meta)."""
    from safetensors.torch import load_model

    src = rank_dir(path, rank)
    weights = model_dir(path, rank) / WEIGHTS
    if not weights.exists():
        raise BackendError(
            f"checkpoint {path}: no {weights.relative_to(Path(path))} for rank {rank}; "
            f"was it written by a run with as many workers?"
        )
    device = next(model.parameters()).device
    load_model(model, str(weights), strict=True, device=str(device))
    trainer_state = None
    if expect_trainer_state:
        if not (src / "trainer.pt").exists():
            raise BackendError(
                f"checkpoint {path}: rank {rank} has no trainer.pt (optimizer state); "
                f"it was written by an engine without the actor role"
            )
        trainer_state = torch.load(src / "trainer.pt", map_location=device, weights_only=True)
    set_rng_state(torch.load(src / "rng.pt", weights_only=True), device)
    meta = json.loads((src / "meta.json").read_text())
    return trainer_state, meta
