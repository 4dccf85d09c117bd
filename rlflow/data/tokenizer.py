"""Tokenizer loading: what the driver needs to tokenize prompts, whatever backend runs the model.

``model.tokenizer`` (else ``model.path``) is either ``builtin:<name>`` or a local Hugging Face
directory. Design decisions:

- Never a hub download: directories load with ``local_files_only=True``; a missing path or a
  directory without a usable tokenizer is a ``BackendError`` naming the path and saying what to
  point at instead.
- The built-in models' tokenizer is the byte-level BPE shipped in ``assets/tiny_tokenizer``
  (made by ``scripts/make_tiny_tokenizer.py``).
- A tokenizer without a pad token gets ``pad = eos`` (logged once per path): prompts are
  left-padded and masked, so the pad id's identity never reaches the model.
- transformers is imported inside ``load_tokenizer``, so importing this module stays cheap; it
  lives beside the data (not in a backend) because the driver tokenizes on remote runs too.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from rlflow.errors import BackendError

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import ModelSpec

log = logging.getLogger("rlflow.data")

BUILTIN_PREFIX = "builtin:"
BUILTIN_TOKENIZERS = {"tiny-qwen2": Path(__file__).parent / "assets" / "tiny_tokenizer"}
# tokenizer_config.json classes that mean "tokenizer.json as it is" (the second is its transformers 5 name)
PLAIN_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
_warned_pad: set[str] = set()


def resolve_path(path: str, root: Path | None) -> Path:
    """A pipeline path, relative paths resolved against the project root (else the cwd)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else (root or Path.cwd()) / p


def builtin_name(path: str) -> str | None:
    if not path.startswith(BUILTIN_PREFIX):
        return None
    name = path[len(BUILTIN_PREFIX) :]
    if name not in BUILTIN_TOKENIZERS:
        raise BackendError(
            f"model.path: unknown built-in model {path!r}; built-ins are "
            f"{', '.join(BUILTIN_PREFIX + n for n in sorted(BUILTIN_TOKENIZERS))}, or give a local Hugging Face directory"
        )
    return name


def local_dir(path: str, root: Path | None, what: str) -> Path:
    directory = resolve_path(path, root)
    if not directory.exists():
        raise BackendError(
            f"{what}: {directory} does not exist; give a local Hugging Face directory "
            f"(rlflow never downloads) or builtin:tiny-qwen2"
        )
    if not directory.is_dir():
        raise BackendError(f"{what}: {directory} is a file; give the Hugging Face model directory that holds it")
    return directory


def load_tokenizer(model_spec: ModelSpec, root: Path | None = None):
    """The tokenizer of ``model_spec`` (``model.tokenizer`` if set, else ``model.path``), pad id set."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    source = model_spec.tokenizer or model_spec.path
    name = builtin_name(source)
    if name is not None:
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(BUILTIN_TOKENIZERS[name]), local_files_only=True)
    else:
        directory = local_dir(source, root, "model.tokenizer" if model_spec.tokenizer else "model.path")
        # AutoTokenizer goes by config.json's model_type: a qwen2 model dir gets Qwen2Tokenizer, which
        # rebuilds Qwen's own pre-tokenizer and ignores the one in tokenizer.json. A directory whose
        # tokenizer_config.json says it is a plain tokenizers file (as the built-in tokenizer and
        # every model fine-tuned from it are) is loaded as exactly that file.
        loader = PreTrainedTokenizerFast if _plain_tokenizers_file(directory) else AutoTokenizer
        try:
            tokenizer = loader.from_pretrained(str(directory), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise BackendError(f"model.path: no usable tokenizer in {directory}: {exc}") from exc
    _ensure_pad(tokenizer, source)
    tokenizer.padding_side = "left"
    return tokenizer


def _plain_tokenizers_file(directory: Path) -> bool:
    """Whether ``directory`` holds a tokenizer.json declared as a plain tokenizers file, no model class."""
    config = directory / "tokenizer_config.json"
    if not (directory / "tokenizer.json").is_file() or not config.is_file():
        return False
    try:
        declared = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return False
    return declared in PLAIN_TOKENIZER_CLASSES


def _ensure_pad(tokenizer, source: str) -> None:
    if tokenizer.pad_token_id is not None:
        return
    if tokenizer.eos_token_id is None:
        raise BackendError(
            f"tokenizer of {source!r} has neither a pad nor an eos token; add one to its tokenizer_config.json"
        )
    tokenizer.pad_token = tokenizer.eos_token
    if source not in _warned_pad:
        _warned_pad.add(source)
        log.warning("tokenizer of %r has no pad token: using its eos token %r as pad", source, tokenizer.eos_token)
