"""verl's RL data format (``data.format: verl``): read and check its rows, turn them into examples.

``read_verl_rows`` reads a split file as verl's preprocessing scripts write it and checks every row;
``load_verl`` renders chat prompts through the tokenizer's chat template and fits them (``examples``).
Design notes: docs/design/verl_format.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rlflow.data.examples import FIT_STAT_KEYS, Candidate, Example, fit_examples, report_fitting
from rlflow.data.records import (
    Oversized,
    json_document,
    json_lines,
    keep_fitting,
    read_document,
    read_jsonl,
    read_parquet,
)
from rlflow.errors import DataError
from rlflow.io import open_regular
from rlflow.schemas.diagnostics import short_repr

REQUIRED = ("data_source", "prompt", "reward_model")
NEEDS = "verl's format needs data_source, prompt, reward_model.ground_truth (ability and extra_info are optional)"
NOT_IN_REWARD_INFO = ("prompt", "data_source")  # they travel as their own batch fields
_MAX_REPORTED = 10
_PLAIN_SCALARS = (str, int, float, bool, type(None))
STAT_KEYS = ("loaded", *FIT_STAT_KEYS)


def _read_json(path: Path) -> list:
    """A JSON list is one document (held whole, capped); JSON Lines are read a line at a time."""
    with open_regular(path) as handle:
        head = handle.read(4096).lstrip()
    if not head.startswith(b"["):
        return read_jsonl(path)
    text = read_document(path)
    return json_document(text, path) if text.lstrip().startswith("[") else json_lines(text, path)


_READERS = {".parquet": read_parquet, ".jsonl": read_jsonl, ".json": _read_json}


def read_verl_rows(path: Path, field: str, truncation: str = "error", stats: dict | None = None) -> list[dict]:
    """The checked rows of ``path`` (``field`` names the spec field, for messages); rows too large to hold
    follow ``truncation`` (``records.keep_fitting``, counted in ``stats``)."""
    if not path.exists():
        raise DataError(f"data.{field}: no file at {path}")
    reader = _READERS.get(path.suffix.lower())
    if reader is None:
        raise DataError(
            f"{path}: data.format verl reads .parquet, .jsonl (JSON Lines) or .json (a JSON list or JSON Lines) "
            f"files, not {path.suffix or 'a file without a suffix'}; convert the file or rename it"
        )
    try:
        rows = reader(path)
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or exc}") from None
    keep_fitting(rows, path, truncation, stats)
    numbered = [(i, row) for i, row in enumerate(rows) if not isinstance(row, Oversized)]
    _check_columns(path, [row for _, row in numbered])
    problems = [f"{path}: row {i}: {p}" for i, row in numbered for p in _problems(row)]
    if problems:
        more = f"\n... and {len(problems) - _MAX_REPORTED} more" if len(problems) > _MAX_REPORTED else ""
        raise DataError("\n".join(problems[:_MAX_REPORTED]) + more)
    return [row for _, row in numbered]


def reward_info_of(row: dict) -> dict:
    """The row's ``reward_info``: ground_truth, extra_info ({} when absent) and its other columns."""
    info = {key: value for key, value in row.items() if key not in NOT_IN_REWARD_INFO}
    info["ground_truth"] = row["reward_model"]["ground_truth"]
    info["extra_info"] = row.get("extra_info") or {}
    return info


def _check_columns(path: Path, rows: list) -> None:
    """A required column that no row has is one error for the file, not one per row."""
    objects = [row for row in rows if isinstance(row, dict)]
    if not objects:
        return
    columns = set().union(*objects)
    missing = [f"'{c}'" for c in REQUIRED if c not in columns]
    if "reward_model" in columns and not any(
        isinstance(row.get("reward_model"), dict) and "ground_truth" in row["reward_model"] for row in objects
    ):
        missing.append("'reward_model.ground_truth'")
    if missing:
        have = ", ".join(sorted(columns))
        raise DataError(f"{path}: no column {', '.join(missing)} (the file has {have}); {NEEDS}")
    if "ground_truth" in columns:
        raise DataError(
            f"{path}: a column 'ground_truth' would clash with the reward's ground_truth, which comes from "
            "reward_model.ground_truth; rename the column or move it into reward_model"
        )


def _problems(row: object) -> list[str]:
    if not isinstance(row, dict):
        return [f"is a {type(row).__name__}, not an object; {NEEDS}"]
    out = [f"misses {key!r} (absent or null); {NEEDS}" for key in REQUIRED if row.get(key) is None]
    source = row.get("data_source")
    if source is not None and (not isinstance(source, str) or not source):
        out.append(f"data_source should be a non-empty text, got {short_repr(source)}")
    if row.get("prompt") is not None:
        out += _prompt_problems(row["prompt"])
    reward_model = row.get("reward_model")
    if reward_model is not None and (not isinstance(reward_model, dict) or reward_model.get("ground_truth") is None):
        out.append(f"reward_model should be an object with a non-null ground_truth, got {short_repr(reward_model)}")
    if not isinstance(row.get("extra_info") or {}, dict):
        out.append(f"extra_info should be an object (or absent), got {short_repr(row['extra_info'])}")
    if row.get("ability") is not None and not isinstance(row["ability"], str):
        out.append(f"ability should be a text, got {short_repr(row['ability'])}")
    out += [
        f"{key} holds a {bad} value; columns hold plain JSON values only (text, numbers, booleans, null, "
        "lists, objects with text keys): convert the column to one of those or drop it"
        for key, value in row.items()
        if key != "prompt" and (bad := _not_plain(value)) is not None
    ]
    return out


def _prompt_problems(prompt: object) -> list[str]:
    if isinstance(prompt, str):
        return [] if prompt else ["prompt is an empty text; give the question, or a list of chat messages"]
    if not isinstance(prompt, list) or not prompt:
        return [
            "prompt should be a text or a non-empty list of chat messages {role: <text>, content: <text>}, "
            f"got {short_repr(prompt)}"
        ]
    return [
        f"prompt[{j}] should be a chat message {{role: <text>, content: <text>}}, got {short_repr(message)}"
        for j, message in enumerate(prompt)
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        )
    ]


def _not_plain(value: object) -> str | None:
    """The type name of the first value in ``value`` that is not plain JSON; None when all are."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _PLAIN_SCALARS):  # the most common: tested first, as every row's values pass here
            continue
        if isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return "object with non-text keys"
            stack += item.values()
        elif isinstance(item, list):
            stack += item
        else:
            return type(item).__name__
    return None


def load_verl(data, split_file: Path, split: str, tokenizer, limit: int | None) -> tuple[list[Example], dict[str, int]]:
    """The examples of ``split_file`` (``split`` names the spec field) and the counts of what was left out."""
    stats = dict.fromkeys(STAT_KEYS, 0)
    rows = read_verl_rows(split_file, split, data.truncation, stats)
    first_chat = next((i for i, row in enumerate(rows) if isinstance(row["prompt"], list)), None)
    if first_chat is not None and not getattr(tokenizer, "chat_template", None):
        raise DataError(
            f"{split_file}: row {first_chat} (and any like it) holds chat messages, but the tokenizer has no "
            "chat_template to render them; set model.tokenizer to a tokenizer directory whose "
            "tokenizer_config.json has a chat_template, or write the prompts as plain texts"
        )
    examples = fit_examples(_candidates(rows, tokenizer, split_file), tokenizer, data, split_file, stats, limit)
    report_fitting(split_file, stats, data)
    return examples, stats


def _candidates(rows: list[dict], tokenizer, file: Path) -> Iterator[Candidate]:
    for i, row in enumerate(rows):
        prompt = row["prompt"]
        templated = isinstance(prompt, list)
        text = _render(tokenizer, prompt, file, i) if templated else prompt
        yield Candidate(f"row {i}", text, row["data_source"], reward_info_of(row), templated)


def _render(tokenizer, messages: list[dict], file: Path, index: int) -> str:
    import jinja2  # the tokenizer's chat templates are jinja2's; reading and checking rows needs none

    messages = [{key: value for key, value in m.items() if value is not None} for m in messages]
    try:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except (jinja2.TemplateError, ValueError, TypeError) as exc:  # the template's own raise_exception included
        raise DataError(
            f"{file}: row {index}: the tokenizer's chat template cannot render the prompt ({exc}); "
            "fix the row's messages (many templates want user and assistant turns to alternate)"
        ) from None
