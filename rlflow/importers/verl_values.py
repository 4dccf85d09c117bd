"""verl values as rlflow values: one converter per verl key whose value needs more than copying.

Design notes: docs/design/importers.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rlflow.importers.verl_config import VerlConfig
from rlflow.schemas.algorithms import NEEDS

SKIP = object()  # "this key gives no value": the next key of the same rlflow field is tried
SAME = object()  # "rlflow's default gives this value already": the key is converted, nothing is written


class Unsupported(Exception):
    """A verl value rlflow cannot take: what is wrong and how to fix it."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


class Context(Protocol):
    """What a converter may look at and report to."""

    cfg: VerlConfig

    def changed(self, line: str) -> None: ...  # a conversion whose meaning shifts
    def workers(self) -> int: ...  # the data-parallel size: n_gpus_per_node x nnodes


Converter = Callable[[Any, Context], Any]


def convert_value(key: str, value: Any, ctx: Context) -> Any:
    """verl's ``key`` = ``value`` as rlflow's value, ``SKIP``, or ``Unsupported``."""
    return CONVERTERS.get(key, _plain)(value, ctx)


def show(value: Any) -> str:
    """A value as a listing line shows it: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def _plain(value: Any, conv: Context) -> Any:
    return SKIP if value is None else value


def _nullable(value: Any, conv: Context) -> Any:
    return value


def _one_file(key: str) -> Converter:
    def convert(value: Any, conv: Context) -> Any:
        files = list(value) if isinstance(value, (list, tuple)) else [value]
        files = [f for f in files if f]
        if not files:
            return SKIP
        if len(files) > 1:
            conv.changed(
                f"{key}={show(files)}: rlflow reads one file per split and uses {files[0]} only; "
                "merge the files into one (e.g. pyarrow.concat_tables) to train on all of them"
            )
        return str(files[0])

    return convert


def _filter_overlong(value: Any, conv: Context) -> Any:
    if not value:
        return SKIP
    conv.changed("data.filter_overlong_prompts=True: data.truncation is drop (over-long prompts are left out, counted)")
    return "drop"


def _truncation(value: Any, conv: Context) -> Any:
    if value in ("error", "left"):
        return value
    raise Unsupported(
        "rlflow keeps a prompt's tail (left) or fails (error); it has no right or middle truncation",
        "set data.truncation=left or error, or data.filter_overlong_prompts=True to leave such prompts out",
    )


def _all_samples(value: Any, conv: Context) -> Any:
    return SKIP if value is None or value < 0 else value


def _hub_id(key: str, field: str, text: str, conv: Context) -> None:
    """Say so when ``text`` is a Hugging Face Hub id: rlflow loads local directories only."""
    if re.fullmatch(r"[\w.-]+/[\w.-]+", text) and not Path(text).exists():
        conv.changed(
            f"{key}={text}: a Hugging Face Hub id; rlflow loads a local directory: "
            f"download it (huggingface-cli download {text} --local-dir DIR) and set {field} to DIR"
        )


def _model_path(value: Any, conv: Context) -> Any:
    text = str(value)
    _hub_id("actor_rollout_ref.model.path", "model.path", text, conv)
    return text


def _critic_model_path(value: Any, conv: Context) -> Any:
    """The critic's model when it is not the policy's (rlflow's null); verl's own default, left unset, is not
    carried: the critic starts from the policy, as verl's examples set it."""
    key, actor = "critic.model.path", conv.cfg.get("actor_rollout_ref.model.path")
    if str(value) == str(actor):
        return SAME
    if not conv.cfg.is_set(key):
        conv.changed(
            f"{key}={value}: verl's default, not set; the critic starts from model.path (the policy's) "
            "with a fresh value head"
        )
        return SAME
    text = str(value)
    _hub_id(key, key, text, conv)
    if not conv.cfg.get("critic.model.tokenizer_path"):
        conv.changed(
            f"{key}={text}: the critic reads the policy's tokenizer (verl: its own), so its model needs the "
            "policy's vocabulary"
        )
    return text


def _critic_enable(value: Any, conv: Context) -> Any:
    """``true`` is written only where verl's rule (on for gae) would not turn the critic on."""
    if value is None:
        return SKIP
    return SAME if bool(value) == (conv.cfg.get("algorithm.adv_estimator") == "gae") else bool(value)


def _lookup(table: dict[str, str], what: str, fix: str) -> Converter:
    def convert(value: Any, conv: Context) -> Any:
        if value is None:
            return SKIP
        found = table.get(str(value).lower())
        if found is None:
            raise Unsupported(f"rlflow has no {what} {value!r}", fix)
        return found

    return convert


def _global_size(key: str, per_worker: str) -> Converter:
    def convert(value: Any, conv: Context) -> Any:
        if value is None:
            return SKIP
        workers = conv.workers()
        size = max(int(value) // workers, 1)
        conv.changed(f"{key}={value}: verl's deprecated global size over {workers} workers: {per_worker} {size}")
        return size

    return convert


def _warmup_steps(optim: str) -> Converter:
    """``optim.lr_warmup_steps``; -1 defers to ``optim.lr_warmup_steps_ratio`` of the training steps."""

    def convert(value: Any, conv: Context) -> Any:
        if value is not None and value >= 0:
            return value
        ratio = conv.cfg.get(f"{optim}.lr_warmup_steps_ratio") or 0
        if not ratio:
            return 0
        total = conv.cfg.get("trainer.total_training_steps")
        if total:
            steps = int(ratio * total)
            conv.changed(f"{optim}.lr_warmup_steps_ratio={ratio}: lr_warmup_steps {steps}")
            return steps
        raise Unsupported(
            "rlflow's warm-up is a number of steps and verl's ratio needs trainer.total_training_steps",
            f"set {optim}.lr_warmup_steps, or trainer.total_training_steps",
        )

    return convert


def _rollout(value: Any, conv: Context) -> Any:
    if value in (None, "???"):
        conv.changed("actor_rollout_ref.rollout.name is not set (verl requires it): the torch rollout")
        return SKIP
    if value in ("vllm", "hf"):
        return value
    raise Unsupported(
        "rlflow's rollouts are torch, hf and vllm (docs/engines.md)", "set actor_rollout_ref.rollout.name=vllm"
    )


def _strategy(value: Any, conv: Context) -> Any:
    if value in ("fsdp", "fsdp2"):
        return "torch"
    raise Unsupported(
        "rlflow's actor engines are torch (for verl's fsdp/fsdp2) and deepspeed (docs/engines.md)",
        "set actor_rollout_ref.actor.strategy=fsdp",
    )


def _needs(key: str) -> Converter:
    """A registered name rlflow's step can run passes; one that needs more (``NEEDS``) is refused with why."""

    def convert(value: Any, conv: Context) -> Any:
        if value in NEEDS:
            message, fix = NEEDS[value]
            raise Unsupported(message, f"{fix}: {key}=...")
        return value

    return convert


def _loss_mode(value: Any, conv: Context) -> Any:
    """verl's bypass loss carries over beside ``rollout_correction.bypass_mode`` (verl's legacy trainer's pair)."""
    if value == "bypass_mode" and conv.cfg.get("algorithm.rollout_correction.bypass_mode"):
        # verl's V1 worker reads the loss's settings from actor.policy_loss.rollout_correction; rlflow
        # has one section, so the loss applies algorithm.rollout_correction's, as the legacy trainer did
        conv.changed(
            "actor_rollout_ref.actor.policy_loss.loss_mode=bypass_mode: verl's bypass loss applies "
            "algorithm.rollout_correction's rollout_is, rollout_rs and loss_type (verl's legacy trainer)"
        )
        return value
    return _needs("actor_rollout_ref.actor.policy_loss.loss_mode")(value, conv)


def _device(value: Any, conv: Context) -> Any:
    if value in ("cuda", "gpu"):
        return "gpu"
    if value == "cpu":
        return "cpu"
    raise Unsupported("rlflow's local pools run on CUDA GPUs or the CPU", "set trainer.device=cuda")


def _project_name(value: Any, conv: Context) -> Any:
    return SKIP if not value else str(value)


def _trainer_mode(value: Any, conv: Context) -> Any:
    if value == "colocate_async":
        raise Unsupported(
            "rlflow runs a pool's stages one at a time, so a rollout sharing the trainer's devices cannot overlap it",
            "set trainer.v1.trainer_mode=separate_async (the rollout gets a pool of its own) or sync",
        )
    return value


def _warmup_batches(value: Any, conv: Context) -> Any:
    if float(value) != int(float(value)) or float(value) < 1:
        raise Unsupported("rlflow samples whole batches ahead, at least one", "set num_warmup_batches to 1, 2, ...")
    return int(float(value))


DTYPES = {
    "fp32": "float32",
    "float32": "float32",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp16": "float16",
    "float16": "float16",
}
OPTIMIZERS = {"adamw": "adamw", "adam": "adam", "sgd": "sgd"}
SCHEDULERS = {"constant": "constant", "cosine": "cosine"}


def _optim(optim: str) -> dict[str, Converter]:
    """The converters of one optimizer section (the actor's, the critic's)."""
    scheduler = _lookup(SCHEDULERS, "lr scheduler", f"set {optim}.lr_scheduler_type to constant or cosine")
    return {
        f"{optim}.optimizer": _lookup(OPTIMIZERS, "optimizer", f"set {optim}.optimizer to AdamW, Adam or SGD"),
        f"{optim}.lr_warmup_steps": _warmup_steps(optim),
        f"{optim}.lr_scheduler_type": scheduler,
        f"{optim}.warmup_style": scheduler,
    }


CONVERTERS: dict[str, Converter] = {
    "data.train_files": _one_file("data.train_files"),
    "data.val_files": _one_file("data.val_files"),
    "data.filter_overlong_prompts": _filter_overlong,
    "data.truncation": _truncation,
    "data.train_max_samples": _all_samples,
    "data.val_max_samples": _all_samples,
    "actor_rollout_ref.model.path": _model_path,
    **{
        key: _lookup(DTYPES, "model dtype", f"set {key} to fp32, bf16 or fp16")
        for key in ("actor_rollout_ref.actor.fsdp_config.model_dtype", "critic.fsdp.model_dtype")
    },
    **{
        key: _global_size(key, per_worker)
        for key, per_worker in (
            ("actor_rollout_ref.actor.ppo_micro_batch_size", "trainer.ppo_micro_batch_size_per_gpu"),
            ("actor_rollout_ref.rollout.log_prob_micro_batch_size", "trainer.log_prob_micro_batch_size_per_gpu"),
            ("actor_rollout_ref.ref.log_prob_micro_batch_size", "the ref_log_prob stage's micro_batch_size"),
            ("critic.ppo_micro_batch_size", "critic.ppo_micro_batch_size_per_gpu"),
            ("critic.forward_micro_batch_size", "the compute_values stage's micro_batch_size"),
        )
    },
    **_optim("actor_rollout_ref.actor.optim"),
    **_optim("critic.optim"),
    "critic.model.path": _critic_model_path,
    "critic.enable": _critic_enable,
    "actor_rollout_ref.actor.clip_ratio_low": _nullable,
    "actor_rollout_ref.actor.clip_ratio_high": _nullable,
    "actor_rollout_ref.actor.strategy": _strategy,
    "actor_rollout_ref.rollout.name": _rollout,
    "algorithm.adv_estimator": _needs("algorithm.adv_estimator"),
    "actor_rollout_ref.actor.policy_loss.loss_mode": _loss_mode,
    "actor_rollout_ref.actor.policy_loss.dro_beta": _nullable,
    "trainer.device": _device,
    "trainer.v1.trainer_mode": _trainer_mode,
    "trainer.v1.separate_async.num_warmup_batches": _warmup_batches,
    "trainer.project_name": _project_name,
}
