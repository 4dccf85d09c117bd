"""Per-rank checkpoints of the local engine: model, optimizer, scheduler, RNG, step.

``rank_<r>/model/`` is a Hugging Face directory, everything else loads with ``weights_only=True``;
``export_pretrained`` makes rank 0's model a directory for others. Design notes: docs/design/local_engine.md.
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


# the transformers class each exported model role loads with: the policy, and the critic (a one-label value head)
AUTO_CLASSES = {"actor": "AutoModelForCausalLM", "critic": "AutoModelForTokenClassification"}


def export_pretrained(path: str | Path, out: Path, dtype: str, role: str = "actor") -> str | None:
    """Write rank 0's model of checkpoint part ``path`` (weights in ``dtype``, config, generation config
    when it generates, tokenizer) to ``out`` as a Hugging Face directory that transformers (and vLLM, for
    the policy) load as it is; ``role``: ``actor`` (the policy) or ``critic`` (``AUTO_CLASSES``).

    Returns a note when ``AutoTokenizer`` would load the tokenizer as another class than the one
    the model was trained with (a model type whose tokenizer class transformers imposes, with a
    tokenizer of its own: the built-in models), else None.
    """
    import transformers
    from transformers import AutoTokenizer

    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    src = model_dir(path)
    auto_class = getattr(transformers, AUTO_CLASSES[role])
    model = auto_class.from_pretrained(str(src), dtype=getattr(torch, dtype), local_files_only=True)
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
    if model.can_generate():  # a critic (a token-classification model) has no generation config
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
