"""verl's models beside the policy as rlflow's blocks: a reward model (``reward.reward_model.*``, or verl's legacy
``reward_model.*``) as ``reward_model:`` with an ``rm_score`` stage, teachers (``distillation.*``) as
``distillation:`` with a ``teacher_log_prob`` stage. Design notes: docs/design/importers.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rlflow.importers.verl_config import VerlConfig
from rlflow.importers.verl_values import DTYPES, show
from rlflow.schemas.distillation import DistillationLossSpec
from rlflow.schemas.verl_names import DISTILL, LEGACY_RM, RM, VERL_NAMES, VerlName

RM_POOL, TEACHER_POOL = "rm_pool", "teacher_pool"
ROUTING_KEY = "data_source"  # the one row field rlflow routes teachers by
# verl's legacy reward_model keys for the model itself (its num_workers, reward_manager, overlong_buffer and
# reward_kwargs belong to the rule reward and are converted with it)
LEGACY_MODEL_KEYS = ("enable", "enable_resource_pool", "n_gpus_per_node", "nnodes", "model.", "rollout.")
LEGACY_MODEL_KEYS += ("micro_batch_size_per_gpu", "max_length")
GENERATIVE = (
    "with reward.custom_reward_function set, verl's reward model is a generative judge the function asks "
    "through verl's reward router, which rlflow does not run; rlflow's generative judge is the judge_score "
    "stage (with.template, with.parse) and the reward_model: block: write them by hand "
    "(docs/reward_models.md#a-generative-judge)"
)


class Context(Protocol):
    """What the conversion of the models reads and reports to (the pipeline converter)."""

    cfg: VerlConfig
    consumed: set[str]
    fields: dict[str, Any]
    origins: dict[str, str]

    def changed(self, line: str) -> None: ...
    def note(self, line: str) -> None: ...
    def drop(self, line: str) -> None: ...
    def problem(self, key: str, message: str, fix: str = "") -> None: ...


@dataclass
class ModelStages:
    """The stages the models add right after generate, (name, kind, resource), and the pools of their own."""

    stages: list[tuple[str, str, str]] = field(default_factory=list)
    pools: list[str] = field(default_factory=list)


def is_reward_model_key(key: str) -> bool:
    """A key of verl's reward model (either spelling), not of the rule reward."""
    legacy = key.startswith(f"{LEGACY_RM}.") and key[len(LEGACY_RM) + 1 :].startswith(LEGACY_MODEL_KEYS)
    return legacy or key.startswith(f"{RM}.")


def ignored_because(key: str, cfg: VerlConfig) -> str:
    """Why verl itself ignores ``key`` (its model is off), or ''."""
    if is_reward_model_key(key) and not reward_model_enabled(cfg):
        return "reward.reward_model.enable is false, so verl ignores it too"
    if key.startswith(f"{DISTILL}.") and not cfg.get(f"{DISTILL}.enabled"):
        return "distillation.enabled is false, so verl ignores it too"
    return ""


def reward_model_enabled(cfg: VerlConfig) -> bool:
    return bool(_rm(cfg, "reward_model.enable")[1])


def convert_models(ctx: Context, actor_pool: str) -> ModelStages:
    """Fill ``ctx.fields`` with the two blocks and say which stages and pools they add."""
    out = ModelStages()
    pool = _reward_model(ctx, actor_pool)
    if pool:
        out.stages.append(("rm_score", "rm_score", pool))
        out.pools += [pool] if pool != actor_pool else []
    if _distillation(ctx):
        out.stages.insert(0, ("teacher_log_prob", "teacher_log_prob", TEACHER_POOL))
        out.pools.insert(0, TEACHER_POOL)
    return out


# ---- reward.reward_model ------------------------------------------------------------------------


def _rm(cfg: VerlConfig, path: str) -> tuple[str, Any]:
    """(verl key, value) for rlflow's ``path``: the legacy spelling where not null (verl's
    ``migrate_legacy_reward_impl`` moves it over, and the table lists it first), else the last spelling's."""
    names = _names(path)
    for name in names:
        if cfg.get(name.verl) is not None:
            return name.verl, cfg.get(name.verl)
    return names[-1].verl, None


def _names(rlflow: str) -> list[VerlName]:
    return [n for n in VERL_NAMES if n.rlflow == rlflow and n.place == "field"]


def _reward_model(ctx: Context, actor_pool: str) -> str:
    """The block, and the pool of the rm_score stage ('' with no reward model to carry)."""
    cfg = ctx.cfg
    enable_key, enabled = _rm(cfg, "reward_model.enable")
    if not enabled:
        ctx.consumed.update(n.verl for n in _names("reward_model.enable"))
        return ""
    keys = [k for k in cfg.set_keys if is_reward_model_key(k)]
    if cfg.get("reward.custom_reward_function.path") or cfg.get("custom_reward_function.path"):
        ctx.consumed.update(keys)
        for key in keys:
            ctx.drop(f"{key}: {show(cfg.get(key))}: {GENERATIVE}")
        return ""
    path_key, path = _rm(cfg, "reward_model.model_path")
    if not path:
        ctx.problem(enable_key, "verl's reward model needs its model_path", f"set {RM}.model_path")
        return ""
    ctx.consumed.update(n.verl for n in _names("reward_model.enable"))
    own_key, own = _rm(cfg, "reward_model.enable_resource_pool")
    ctx.consumed.update(n.verl for n in _names("reward_model.enable_resource_pool"))
    _put(ctx, "reward_model.model_path", path_key, str(path))
    _put(ctx, "reward_model.enable_resource_pool", own_key, bool(own))
    _dtype(ctx)
    for name in _names_under("reward_model."):
        _if_set(ctx, name.rlflow)
    ctx.note(
        f"{enable_key}=True: verl's training reward is the reward model's score alone; rlflow's rm_score stage "
        "gives it (reward_model.combine: replace) while the reward stage still reports reward/* and scores "
        "validation"
    )
    return RM_POOL if own else actor_pool


def _dtype(ctx: Context) -> None:
    """verl runs its reward model in rollout.dtype (bfloat16 by default); rlflow's null is model.dtype."""
    key, value = _rm(ctx.cfg, "reward_model.dtype")
    dtype = DTYPES.get(str(value).lower()) if value is not None else None
    if dtype is None:
        if value is not None:
            ctx.problem(key, f"rlflow has no model dtype {value!r}", f"set {key} to bf16, fp16 or fp32")
        return
    ctx.consumed.update(n.verl for n in _names("reward_model.dtype"))
    if dtype != ctx.fields.get("model.dtype", "float32"):
        _put(ctx, "reward_model.dtype", key, dtype)


def _if_set(ctx: Context, path: str) -> None:
    """A setting the user set, in either spelling (verl's defaults for a generative judge's sampling are not
    rlflow's, and rm_score reads none of them)."""
    if path in ctx.fields or path in ("reward_model.enable", "reward_model.dtype"):
        return  # written above (or left to rlflow's null, which gives verl's value)
    verl_key, value = _rm(ctx.cfg, path)
    if verl_key in ctx.cfg.set_keys and value is not None:
        _put(ctx, path, verl_key, value)


def _put(ctx: Context, path: str, verl_key: str, value: Any) -> None:
    ctx.fields[path] = value
    ctx.origins[path] = verl_key
    ctx.consumed.update([verl_key, *(n.verl for n in _names(path))])  # the spelling verl overwrote too


# ---- distillation -------------------------------------------------------------------------------


def _distillation(ctx: Context) -> bool:
    """The ``distillation:`` block; False when distillation is off (or a problem stops it)."""
    cfg = ctx.cfg
    ctx.consumed.add(f"{DISTILL}.enabled")
    if not cfg.get(f"{DISTILL}.enabled"):
        return False
    teachers = _teachers(ctx)
    if not teachers:
        ctx.problem(
            f"{DISTILL}.enabled",
            "distillation needs a teacher with a model_path",
            f"set {DISTILL}.teacher_models.teacher_model.model_path",
        )
        return False
    _put(ctx, "distillation.enabled", f"{DISTILL}.enabled", True)
    ctx.fields["distillation.teacher_models"] = teachers
    _teacher_key(ctx)
    defaults = DistillationLossSpec()
    for name in _names_under("distillation.distillation_loss."):
        value = cfg.get(name.verl)
        ctx.consumed.add(name.verl)
        if cfg.has(name.verl) and value != getattr(defaults, name.rlflow.rpartition(".")[2]):
            _put(ctx, name.rlflow, name.verl, value)
    return True


def _names_under(prefix: str) -> list[VerlName]:
    return [n for n in VERL_NAMES if n.rlflow.startswith(prefix) and n.place == "field"]


def _teacher_key(ctx: Context) -> None:
    key = f"{DISTILL}.teacher_key"
    ctx.consumed.add(key)
    if ctx.cfg.get(key) not in (None, ROUTING_KEY):
        ctx.problem(
            key,
            f"rlflow routes rows to teachers by {ROUTING_KEY}, the field its data loader fills",
            f"set {key}={ROUTING_KEY} and key each teacher by the rows' {ROUTING_KEY}",
        )


def _teachers(ctx: Context) -> dict[str, dict]:
    """Each teacher with a model_path; verl's placeholder ``teacher_model`` (no model_path) is left out."""
    teachers = {}
    section = ctx.cfg.get(f"{DISTILL}.teacher_models") or {}
    for name, entry in section.items():
        prefix = f"{DISTILL}.teacher_models.{name}"
        if not isinstance(entry, dict) or not entry.get("model_path"):
            ctx.consumed.update(k for k in ctx.cfg.set_keys if k.startswith(prefix + "."))
            continue
        teacher = {"model_path": str(entry["model_path"])}
        ctx.origins[f"distillation.teacher_models.{name}.model_path"] = f"{prefix}.model_path"
        ctx.consumed.update({f"{prefix}.model_path", f"{prefix}.key"})
        if entry.get("key") is not None:
            teacher = {"key": str(entry["key"]), **teacher}
            ctx.origins[f"distillation.teacher_models.{name}.key"] = f"{prefix}.key"
        dtype = _teacher_dtype(ctx, prefix)
        teachers[str(name)] = {**teacher, **({"dtype": dtype} if dtype else {})}
    return teachers


def _teacher_dtype(ctx: Context, prefix: str) -> str | None:
    """``inference.dtype`` where the user set it; verl's default follows the rollout's, as rlflow's null does."""
    key = f"{prefix}.inference.dtype"
    if key not in ctx.cfg.set_keys:
        return None
    value = ctx.cfg.get(key)
    ctx.consumed.add(key)
    dtype = DTYPES.get(str(value).lower())
    if dtype is None:
        ctx.problem(key, f"rlflow has no model dtype {value!r}", f"set {key} to bf16, fp16 or fp32")
    return dtype
