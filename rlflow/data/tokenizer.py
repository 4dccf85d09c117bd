"""Tokenizer loading: what the driver needs to tokenize prompts, whatever backend runs the model.

``model.tokenizer`` (else ``model.path``) is ``builtin:<name>`` or a local Hugging Face directory; never a hub
download. Design notes: docs/design/data.md.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlflow.assets import BUILTIN_PREFIX, builtin_path
from rlflow.errors import BackendError
from rlflow.io import read_text

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.schemas.pipeline import ModelSpec

log = logging.getLogger("rlflow.data")

BUILTIN_TOKENIZERS = {"tiny-qwen2": Path(__file__).parent / "assets" / "tiny_tokenizer"}
# tokenizer_config.json classes that mean "tokenizer.json as it is" (the second is its transformers 5 name)
CONFIG_BYTES = 16 << 20  # a tokenizer_config.json or chat template: far below this, a FIFO or device refused

PLAIN_TOKENIZER_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")
# tokenizer_config.json keys that change nothing about prompt ids (anything else: transformers loads it)
PROMPT_NEUTRAL_KEYS = frozenset(
    {
        "backend",
        "tokenizer_class",
        "bos_token",
        "eos_token",
        "pad_token",
        "unk_token",
        "extra_special_tokens",
        "additional_special_tokens",
        "clean_up_tokenization_spaces",
        "model_max_length",
        "padding_side",
        "is_local",
        "local_files_only",
        "chat_template",
    }
)
_warned_pad: set[str] = set()


def resolve_path(path: str, root: Path | None) -> Path:
    """A pipeline path: a packaged ``builtin:`` folder, or relative to the project root (else the cwd)."""
    try:
        packaged = builtin_path(path)
    except ValueError as exc:
        raise BackendError(f"model.path: {exc}, or give a local Hugging Face directory") from None
    p = packaged or Path(os.path.expanduser(path))
    return p if p.is_absolute() else (root or Path.cwd()) / p


def builtin_name(path: str) -> str | None:
    """The name of a model built in code (``builtin:tiny-qwen2``); None for a folder, packaged or not."""
    if not path.startswith(BUILTIN_PREFIX):
        return None
    resolve_path(path, None)  # an unknown name: an error naming the known ones
    name = path[len(BUILTIN_PREFIX) :]
    return name if name in BUILTIN_TOKENIZERS else None


def local_dir(path: str, root: Path | None, what: str) -> Path:
    directory = resolve_path(path, root)
    if not directory.exists():
        raise BackendError(
            f"{what}: {directory} does not exist; give a local Hugging Face directory "
            f"(rlflow never downloads), builtin:tiny-qwen2 or builtin:tiny-sql-warm"
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
        declared = json.loads(read_text(config, CONFIG_BYTES, "tokenizer config")).get("tokenizer_class")
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


def load_prompt_tokenizer(model_spec: ModelSpec, root: Path | None = None):
    """What the driver tokenizes prompts with: a ``PromptTokenizer`` when the tokenizer is a plain
    tokenizers file that it reads exactly as transformers would, else ``load_tokenizer``'s."""
    source = model_spec.tokenizer or model_spec.path
    name = builtin_name(source)
    if name is not None:
        directory = BUILTIN_TOKENIZERS[name]
    else:
        directory = local_dir(source, root, "model.tokenizer" if model_spec.tokenizer else "model.path")
    plain = PromptTokenizer.load(directory, source, functools.partial(load_tokenizer, model_spec, root))
    return plain if plain is not None else load_tokenizer(model_spec, root)


class PromptTokenizer:
    """A plain tokenizers file as the driver uses it: ``tokenizer(texts, add_special_tokens=...)["input_ids"]``,
    ``pad_token_id``, ``eos_token``, ``chat_template``, ``apply_chat_template`` (by transformers' tokenizer,
    loaded the first time it is asked)."""

    def __init__(self, backend, pad_token_id: int, eos_token: str | None, chat_template: str | None, full) -> None:
        self.backend = backend
        self.pad_token_id = pad_token_id
        self.eos_token = eos_token
        self.chat_template = chat_template
        self._full: Callable[[], Any] = functools.cache(full)

    @classmethod
    def load(cls, directory: Path, source: str, full: Callable[[], Any]) -> PromptTokenizer | None:
        """The tokenizer in ``directory``; None unless it is a plain tokenizers file whose config holds only
        ``PROMPT_NEUTRAL_KEYS`` and names only tokens its vocabulary has (transformers would add the others)."""
        if not _plain_tokenizers_file(directory):
            return None
        try:
            config = json.loads(read_text(directory / "tokenizer_config.json", CONFIG_BYTES, "tokenizer config"))
        except (OSError, ValueError):
            return None
        if not isinstance(config, dict) or set(config) - PROMPT_NEUTRAL_KEYS:
            return None
        from tokenizers import Tokenizer

        backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
        backend.no_truncation()  # as transformers calls it without truncation or padding
        backend.no_padding()
        named = {key: _token(config.get(key)) for key in ("bos_token", "eos_token", "pad_token", "unk_token")}
        extra = [*config.get("extra_special_tokens", []), *config.get("additional_special_tokens", [])]
        if any(backend.token_to_id(t) is None for t in [*named.values(), *map(_token, extra)] if t is not None):
            return None
        pad = named["pad_token"]
        if pad is None:
            if named["eos_token"] is None:
                raise BackendError(
                    f"tokenizer of {source!r} has neither a pad nor an eos token; add one to its tokenizer_config.json"
                )
            pad = named["eos_token"]
            if source not in _warned_pad:
                _warned_pad.add(source)
                log.warning("tokenizer of %r has no pad token: using its eos token %r as pad", source, pad)
        return cls(backend, backend.token_to_id(pad), named["eos_token"], _chat_template(directory, config), full)

    def __call__(self, texts: list[str], add_special_tokens: bool = True) -> dict[str, list[list[int]]]:
        encodings = self.backend.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        return {"input_ids": [e.ids for e in encodings]}

    def apply_chat_template(self, messages: list[dict], **kwargs: Any) -> Any:
        return self._full().apply_chat_template(messages, **kwargs)


def _token(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken dict."""
    return value.get("content") if isinstance(value, dict) else value


def _chat_template(directory: Path, config: dict) -> str | None:
    """The chat template transformers would find: in tokenizer_config.json, else chat_template.jinja."""
    if config.get("chat_template"):
        return config["chat_template"]
    file = directory / "chat_template.jinja"
    if not file.exists():
        return None
    try:
        return read_text(file, CONFIG_BYTES, "chat template")
    except (OSError, ValueError) as exc:  # a FIFO or device refused unopened, an oversized or non-UTF-8 file
        raise BackendError(f"model.path: cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from exc
