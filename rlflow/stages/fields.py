"""The batch fields stages exchange: their expected shape and dtype, and the check of a stage's output.

The runtime checks every batch a stage returns against the fields it ``writes``.
Design notes: docs/design/stage_kinds.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from rlflow.stages.base import STATE_FIELDS

if TYPE_CHECKING:  # pragma: no cover
    from rlflow.batch import Batch

Dim = Literal["rows", "response", "any"]
DtypeClass = Literal["integer", "floating", "list"]


@dataclass(frozen=True)
class FieldSpec:
    """What one batch field looks like: its dims (tensors) and its dtype class."""

    dims: tuple[Dim, ...]
    dtype: DtypeClass

    def describe(self, rows: int | None, response_length: int) -> str:
        if self.dtype == "list":
            return "a list" + (f" of {rows} rows" if rows is not None else "")
        size = {"rows": str(rows) if rows is not None else "rows", "response": str(response_length), "any": "*"}
        return f"[{', '.join(size[d] for d in self.dims)}] {self.dtype}"


_IDS = FieldSpec(("rows", "any"), "integer")
_TOKENS_INT = FieldSpec(("rows", "response"), "integer")
_TOKENS_FLOAT = FieldSpec(("rows", "response"), "floating")
_PER_ROW = FieldSpec(("rows",), "list")

FIELDS: dict[str, FieldSpec] = {
    # the data loader's
    "prompts": _IDS,
    "prompt_mask": _IDS,
    "uid": _PER_ROW,
    "data_source": _PER_ROW,
    "raw_prompt": _PER_ROW,
    "reward_info": _PER_ROW,
    # rollout
    "responses": _TOKENS_INT,
    "response_mask": _TOKENS_INT,
    "response_text": _PER_ROW,
    "rollout_log_probs": _TOKENS_FLOAT,
    "num_turns": FieldSpec(("rows",), "integer"),  # a multi-turn rollout's (verl's __num_turns__)
    "tool_call_counts": FieldSpec(("rows",), "integer"),  # and its tool calls per row (verl's name)
    # reward
    "token_level_scores": _TOKENS_FLOAT,
    "scores": FieldSpec(("rows",), "floating"),
    "reward_extra": _PER_ROW,
    "rm_scores": _TOKENS_FLOAT,  # a reward model's or judge's score on each row's last token (verl's name)
    # distillation: the teacher's log-prob of each student token ([.., 1]), or its top-k and their ids
    "teacher_logprobs": FieldSpec(("rows", "response", "any"), "floating"),
    "teacher_ids": FieldSpec(("rows", "response", "any"), "integer"),
    # log-probs
    "old_log_probs": _TOKENS_FLOAT,
    "entropys": _TOKENS_FLOAT,
    "ref_log_prob": _TOKENS_FLOAT,
    # critic
    "values": _TOKENS_FLOAT,
    # advantage
    "token_level_rewards": _TOKENS_FLOAT,
    "advantages": _TOKENS_FLOAT,
    "returns": _TOKENS_FLOAT,
    # rollout correction
    "rollout_is_weights": _TOKENS_FLOAT,
    "rollout_rs_mask": _TOKENS_INT,
}

# Written by stages but never carried in a batch: loop state, the checkpoint on disk, validation metrics.
OUTSIDE_BATCH = STATE_FIELDS | {"checkpoint", "val_metrics"}


def output_problems(out: Batch, writes: Iterable[str], rows: int | None, response_length: int) -> list[str]:
    """What is wrong with ``out`` as the output of a stage that ``writes`` these fields, one line each.

    ``rows``: the rows sent to the stage (None when it changes rows); ``response_length``:
    ``data.max_response_length``.
    """
    problems = []
    for name in writes:
        if name in OUTSIDE_BATCH:
            continue
        if name not in out:
            problems.append(f"field {name!r} is missing (it returned {sorted(out.keys()) or 'no fields'})")
            continue
        spec = FIELDS.get(name)
        if spec is None:
            continue
        got = _describe_value(out[name])
        if not _matches(spec, out[name], rows, response_length):
            problems.append(f"field {name!r}: expected {spec.describe(rows, response_length)}, got {got}")
    return problems


def _describe_value(value: Any) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"[{', '.join(str(s) for s in value.shape)}] {str(value.dtype).removeprefix('torch.')}"
    return f"a list of {len(value)} rows"


def _matches(spec: FieldSpec, value: Any, rows: int | None, response_length: int) -> bool:
    is_tensor = hasattr(value, "shape") and hasattr(value, "dtype")
    if spec.dtype == "list":
        return not is_tensor and (rows is None or len(value) == rows)
    if not is_tensor or len(value.shape) != len(spec.dims) or not _dtype_matches(spec.dtype, value.dtype):
        return False
    size = {"rows": rows, "response": response_length, "any": None}
    return all(size[d] is None or n == size[d] for d, n in zip(spec.dims, value.shape))


def _dtype_matches(cls: DtypeClass, dtype: Any) -> bool:
    if cls == "floating":
        return bool(dtype.is_floating_point)
    return not dtype.is_floating_point and not dtype.is_complex and str(dtype) != "torch.bool"
