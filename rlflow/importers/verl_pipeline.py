"""Turn a composed verl GRPO or PPO config into an rlflow pipeline, and say what did not carry over.

``convert(VerlConfig)`` builds the pipeline of one step as verl's ``PPOTrainerSync`` runs it (with the critic's
stages where verl trains one), every knob through ``rlflow.schemas.verl_names``. Design notes: docs/design/importers.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rlflow.errors import ConfigError, Diagnostic
from rlflow.importers.pipeline_yaml import no_template, render_pipeline
from rlflow.importers.verl_config import VerlConfig
from rlflow.importers.verl_models import ModelStages, convert_models, ignored_because
from rlflow.importers.verl_values import SAME, SKIP, Unsupported, convert_value, show
from rlflow.schemas.diagnostics import short_repr
from rlflow.schemas.pipeline import NAME_PATTERN, CriticSpec, Pipeline
from rlflow.schemas.schema_errors import clean_loc
from rlflow.schemas.verl_names import BY_VERL, ROLLOUT, VERL_NAMES, VerlName, why_not
from rlflow.stages import STAGE_KINDS
from rlflow.tools.config import IGNORED, MultiTurnConfig

VERL_DEFAULT_REWARD = "verl.utils.reward_score:default_compute_score"
ACTOR_POOL, REWARD_POOL, ROLLOUT_POOL = "actor_pool", "reward_pool", "rollout_pool"
POOLS = {"local": ACTOR_POOL, "cpu": REWARD_POOL}  # pool type -> its name in the pipeline
SINKS = {"console", "wandb", "tensorboard", "mlflow"}  # verl logger names rlflow.yaml logging.sinks takes
CRITIC_KINDS = ("compute_values", "update_critic")
# rlflow's null for these critic places is the value of another place (as verl's defaults interpolate it)
FOLLOWS = {
    "critic.model.dtype": "model.dtype",
    "critic.ppo_mini_batch_size": "trainer.ppo_mini_batch_size",
    "critic.ppo_micro_batch_size_per_gpu": "trainer.ppo_micro_batch_size_per_gpu",
    "critic.ppo_epochs": "trainer.ppo_epochs",
    "critic.loss_agg_mode": "algorithm.loss_agg_mode",
    "stages.compute_values.with.micro_batch_size": "critic.ppo_micro_batch_size_per_gpu",
}
# critic.model keys the critic takes from the policy's model: carried when they equal the actor's
CRITIC_MODEL_AS_ACTOR = {
    "critic.model.enable_gradient_checkpointing": "actor_rollout_ref.model.enable_gradient_checkpointing",
    "critic.model.use_remove_padding": "actor_rollout_ref.model.use_remove_padding",
}
# the step, in verl's order: (stage name, kind, resource); verl 0.9.1 puts the critic on the actor's pool
# (its resource pool manager maps Role.Critic to global_pool, always)
STEP = (
    ("generate", "generate", ACTOR_POOL),
    ("reward", "reward_function", REWARD_POOL),
    ("old_log_prob", "old_log_prob", ACTOR_POOL),
    ("ref_log_prob", "ref_log_prob", ACTOR_POOL),
    ("values", "compute_values", ACTOR_POOL),
    ("advantage", "grpo_advantage", "driver"),
    ("update_critic", "update_critic", ACTOR_POOL),
    ("update_actor", "update_actor", ACTOR_POOL),
    ("sync_weights", "sync_weights", ACTOR_POOL),
    ("validate", "validate", ACTOR_POOL),
)


@dataclass
class Conversion:
    """The pipeline, where each of its values came from, and what the user should know."""

    source: str
    pipeline: dict
    origins: dict[str, str] = field(default_factory=dict)  # rlflow place -> verl key
    changed: list[str] = field(default_factory=list)  # "key=value: how its meaning shifts"
    dropped: list[str] = field(default_factory=list)  # "key: value: why, what to do"
    notes: list[str] = field(default_factory=list)  # "key=value: what verl does with it, and rlflow too"

    def listing(self) -> list[str]:
        """The lines a user reads: notes, conversions that change meaning, then keys not carried over."""
        lines = []
        if self.notes:
            lines += ["converted, as verl runs it:", *(f"  {line}" for line in self.notes)]
        if self.changed:
            lines += ["converted with a change of meaning:", *(f"  {line}" for line in self.changed)]
        if self.dropped:
            lines += ["not carried over (no rlflow counterpart):", *(f"  {line}" for line in self.dropped)]
        return lines

    def render(self, check_with: str = "FILE") -> str:
        """The pipeline file: the listing as comments on top, then the pipeline."""
        head = [
            f"Imported from verl's {self.source} by `rlflow import-verl`; check it with `rlflow validate {check_with}`."
        ]
        comments = [no_template(line) for line in [*head, *self.listing()]]
        return "".join(f"# {line}\n" for line in comments) + render_pipeline(self.pipeline)


def convert(cfg: VerlConfig) -> Conversion:
    """The pipeline for ``cfg``; ConfigError naming every verl key whose value rlflow cannot take."""
    return _Converter(cfg).run()


class _Converter:
    def __init__(self, cfg: VerlConfig) -> None:
        self.cfg = cfg
        self.out = Conversion(cfg.source, {})
        self.problems: list[Diagnostic] = []
        self.consumed: set[str] = set()
        self.fields: dict[str, Any] = {}  # dotted pipeline path -> value
        self.withs: dict[str, dict] = {}  # stage kind -> its `with:`
        self.pools: dict[str, dict] = {"local": {}, "cpu": {}}
        self.uses_critic = verl_uses_critic(cfg)
        self.models = ModelStages()

    def run(self) -> Conversion:
        self._critic_switch()
        for target, names in _targets().items():
            if self.uses_critic or not _is_critic(names[0]):
                self._fill(target, names)
        self._critic_settings()
        self._mini_batches()
        self._multi_turn()
        self.models = convert_models(self, ACTOR_POOL)
        stages = self._stages()
        self._list_dropped()
        pipeline = self._assemble(stages)
        self._validate(pipeline)
        if self.problems:
            raise ConfigError(self.problems)
        self.out.pipeline = pipeline
        return self.out

    # ---- knobs -------------------------------------------------------------------------------
    def _fill(self, target: tuple, names: list[VerlName]) -> None:
        """Set one rlflow place from the first of its verl keys that gives a value (set keys first)."""
        ordered = sorted(names, key=lambda n: not self.cfg.is_set(n.verl))
        for name in ordered:
            if not self.cfg.has(name.verl):
                continue
            try:
                value = convert_value(name.verl, self.cfg.get(name.verl), self)
            except Unsupported as exc:
                self._problem(name.verl, exc.message, exc.fix)
                return
            if value is SKIP:
                continue
            self.consumed.update(n.verl for n in names)
            if value is not SAME and not (_is_critic(name) and _equal(value, self._effective(_place(name)))):
                self._put(name, value)
            return

    def _put(self, name: VerlName, value: Any) -> None:
        place, owner = name.place, name.owner
        if place == "field":
            self.fields[name.rlflow] = value
            self.out.origins[name.rlflow] = name.verl
        elif place == "stage":
            self.withs.setdefault(owner, {})[name.rlflow] = value
            self.out.origins[f"stages.{owner}.with.{name.rlflow}"] = name.verl
        elif place == "pool":
            self.pools[owner][name.rlflow] = value
            self.out.origins[f"resources.{POOLS[owner]}.{name.rlflow}"] = name.verl

    # ---- the critic ----------------------------------------------------------------------------
    def _critic_switch(self) -> None:
        """verl's ``need_critic``: ``critic.enable`` when set, else on for gae; gae without one is refused."""
        estimator = self.cfg.get("algorithm.adv_estimator")
        if not self.uses_critic:
            self.consumed.add("critic.enable")  # false, or null with a critic-free estimator: rlflow's null too
        if self.cfg.get("critic.enable") is False and estimator == "gae":
            self._problem(
                "critic.enable",
                "adv_estimator gae needs a critic: its advantages are computed from the critic's values",
                "remove critic.enable=False, or set a critic-free algorithm.adv_estimator (docs/algorithms.md)",
            )
        if self.uses_critic and self.cfg.get("trainer.v1.trainer_mode") == "separate_async":
            self._problem(
                "trainer.v1.trainer_mode",
                "rlflow's separate_async does not train a critic yet: verl's reruns values, advantage and both "
                "updates for each mini-batch (its parameter_sync_step cycles); rlflow's step computes the batch's "
                "values once",
                "set trainer.v1.trainer_mode=sync for PPO with a critic",
            )

    def _critic_settings(self) -> None:
        """What rlflow's critic takes from the policy (its model's build, its tokenizer) is carried where the
        user's value is the actor's, else listed; verl's token-budget micro-batches it inherits are noted."""
        if not self.uses_critic:
            return
        for key, actor in CRITIC_MODEL_AS_ACTOR.items():
            if key in self.cfg.set_keys and self.cfg.get(key) == self.cfg.get(actor):
                self.consumed.add(key)
        tokenizer = self.cfg.get("critic.model.tokenizer_path")
        actor = self.cfg.get("actor_rollout_ref.model.tokenizer_path") or self.cfg.get("actor_rollout_ref.model.path")
        if "critic.model.tokenizer_path" in self.cfg.set_keys and tokenizer in (None, actor):
            self.consumed.add("critic.model.tokenizer_path")
        if self.cfg.get("critic.use_dynamic_bsz") and "critic.use_dynamic_bsz" not in self.cfg.set_keys:
            self.changed(
                "critic.use_dynamic_bsz=True: verl's critic follows the actor's token-budget micro-batches; "
                "rlflow's counts samples: critic.ppo_micro_batch_size_per_gpu, else trainer.ppo_micro_batch_size_per_gpu"
            )

    def _why_no_critic(self) -> str:
        if self.cfg.get("critic.enable") is False:
            return "critic.enable is false"
        return f"algorithm.adv_estimator is {self.cfg.get('algorithm.adv_estimator')}, critic.enable unset"

    def _effective(self, path: str) -> Any:
        """What the pipeline holds at ``path`` so far: the converted value, else what rlflow's null or
        default there gives."""
        if path.startswith("stages."):
            _, kind, _, key = path.split(".", 3)
            if key in self.withs.get(kind, {}):
                return self.withs[kind][key]
        elif path in self.fields:
            return self.fields[path]
        if path in FOLLOWS:
            return self._effective(FOLLOWS[path])
        node: Any = CriticSpec() if path.startswith("critic.") else None
        for part in path.split(".")[1:] if node is not None else ():
            node = getattr(node, part)
        return node

    def _mini_batches(self) -> None:
        """verl 0.9.1 pads a batch that is not a multiple of the mini-batch (its last mini-batch is
        shorter, as rlflow runs it) and refuses a mini-batch larger than the batch (the critic's too)."""
        batch = self.fields.get("trainer.train_batch_size")
        for path, update in (
            ("trainer.ppo_mini_batch_size", "update"),
            ("critic.ppo_mini_batch_size", "critic update"),
        ):
            mini = self.fields.get(path)
            if not isinstance(batch, int) or not isinstance(mini, int) or batch <= 0 or mini <= 0:
                continue  # unset, or a bad value the schema refuses, naming its key
            key = self.out.origins[path]
            if batch < mini:
                self._problem(
                    key,
                    f"a mini-batch larger than data.train_batch_size {batch} (verl refuses it too)",
                    f"set {key} to at most {batch}",
                )
            elif batch % mini:
                full, rest = divmod(batch, mini)
                self.out.notes.append(
                    f"{key}={mini}: data.train_batch_size {batch} is not a multiple, so each {update} takes {full} "
                    f"mini-batches of {mini} prompts and a last one of {rest} (verl pads it with no-op samples)"
                )

    def _multi_turn(self) -> None:
        """verl's ``rollout.multi_turn`` block, when enabled, as the generate stage's ``with.multi_turn`` (the
        keys both read; those verl's agent loop ignores, and rlflow too, are listed instead). Disabled, its keys
        are ignored, as verl does."""
        prefix = f"{ROLLOUT}.multi_turn."
        keys = [k for k in MultiTurnConfig.model_fields if self.cfg.has(prefix + k) and k not in IGNORED]
        self.consumed.update(prefix + k for k in [*keys, *IGNORED])
        if not self.cfg.get(prefix + "enable"):
            self.consumed.update(k for k in self.cfg.set_keys if k.startswith(prefix))
            return
        for key, why in IGNORED.items():
            if prefix + key in self.cfg.set_keys:
                self.drop(f"{prefix}{key}: {show(self.cfg.get(prefix + key))}: verl's agent loop ignores it, and {why}")
        block = {k: self.cfg.get(prefix + k) for k in keys if self.cfg.get(prefix + k) is not None}
        self.withs.setdefault("generate", {})["multi_turn"] = block
        for key in block:
            self.out.origins[f"stages.generate.with.multi_turn.{key}"] = prefix + key
        for key in ("tool_config_path", "function_tool_path"):
            if block.get(key) and not Path(block[key]).is_absolute():
                self.changed(
                    f"{prefix}{key}={block[key]}: rlflow reads it from the project root (verl: its working directory)"
                )

    def workers(self) -> int:
        return int(self.cfg.get("trainer.n_gpus_per_node") or 1) * int(self.cfg.get("trainer.nnodes") or 1)

    def changed(self, line: str) -> None:
        """``line`` is ``key=value: ...``: the key is converted, so it is not also listed as dropped."""
        self.out.changed.append(line)
        self.consumed.add(line.partition("=")[0])

    def drop(self, line: str) -> None:
        self.out.dropped.append(line)

    def note(self, line: str) -> None:
        self.out.notes.append(line)

    @property
    def origins(self) -> dict[str, str]:
        return self.out.origins

    def problem(self, key: str, message: str, fix: str = "") -> None:
        self._problem(key, message, fix)

    def _problem(self, key: str, message: str, fix: str = "") -> None:
        value = self.cfg.get(key)
        via = " (a command-line override)" if key in self.cfg.override_keys else ""
        self.problems.append(Diagnostic("", 0, 0, key, f"{short_repr(value)}{via}: {message}", fix))

    # ---- the step ----------------------------------------------------------------------------
    def _stages(self) -> list[dict]:
        uses_kl = bool(self.fields.get("algorithm.use_kl_loss")) or bool(self.fields.get("algorithm.use_kl_in_reward"))
        validates = "data.val" in self.fields and any(
            self.cfg.is_set(n.verl) for n in VERL_NAMES if n.owner == "validate"
        )
        self.withs["reward_function"] = self._reward()
        stages = []
        separate = self.fields.get("trainer.trainer_mode") == "separate_async"
        for name, kind, resource in STEP:
            if separate and kind == "generate":  # verl's separate_async: the rollout on GPUs of its own
                resource = ROLLOUT_POOL
            if kind in CRITIC_KINDS and not self.uses_critic:
                continue  # the critic's keys the user set are listed, with why (_list_dropped)
            if (kind == "ref_log_prob" and not uses_kl) or (kind == "validate" and not validates):
                unused = {n.verl for n in VERL_NAMES if n.owner == kind}  # listed once: as not carried over
                self.consumed.difference_update(unused)
                self.out.changed = [line for line in self.out.changed if line.partition("=")[0] not in unused]
                continue
            stage = {"name": name, "uses": kind, "on": resource}
            if self.withs.get(kind):
                stage["with"] = self.withs[kind]
            stages.append(stage)
            if kind == "generate":  # verl asks teachers and reward model beside the rollout, before the rule
                stages += [{"name": n, "uses": k, "on": on} for n, k, on in self.models.stages]
        return stages

    def _reward(self) -> dict:
        """verl moves a legacy ``custom_reward_function`` with any value set over ``reward.custom_reward_function``."""
        self.consumed.update(n.verl for n in VERL_NAMES if n.owner == "reward_function")
        legacy = self.cfg.get("custom_reward_function") or {}
        section = "custom_reward_function" if any(v is not None for v in legacy.values()) else None
        section = section or "reward.custom_reward_function"
        path, name = self.cfg.get(f"{section}.path"), self.cfg.get(f"{section}.name")
        overlong = self._overlong_buffer()
        if not path:
            return {"function": VERL_DEFAULT_REWARD, "max_memory_mb": None, **overlong}
        if not name:
            self._problem(f"{section}.name", "verl needs the function's name with its path", f"set {section}.name")
            return {}
        if not Path(os.path.expanduser(str(path))).is_absolute():
            self.changed(
                f"{section}.path={path}: relative paths start at the project root (the folder of rlflow.yaml), "
                "not at the directory verl was launched from"
            )
        return {"function": f"{path}:{name}", **overlong}

    def _overlong_buffer(self) -> dict:
        """DAPO's overlong buffer from whichever of verl's spellings the user set (the recipe's scripts use
        ``reward_model.overlong_buffer``, its config ``reward.reward_kwargs.overlong_buffer_cfg``)."""
        for section in ("reward.reward_kwargs.overlong_buffer_cfg", "reward_model.overlong_buffer"):
            if self.cfg.is_set(section):
                values = {k: self.cfg.get(f"{section}.{k}") for k in ("enable", "len", "penalty_factor", "log")}
                values = {k: v for k, v in values.items() if v is not None}
                if values.get("enable"):
                    for key in values:
                        self.out.origins[f"stages.reward_function.with.overlong_buffer.{key}"] = f"{section}.{key}"
                    return {"overlong_buffer": values}
        return {}

    def _assemble(self, stages: list[dict]) -> dict:
        pipeline: dict[str, Any] = {"name": self._name()}
        pipeline["description"] = f"Imported from verl's {Path(self.cfg.source).name} by rlflow import-verl."
        for path, value in self.fields.items():
            if path == "name":
                continue
            node = pipeline
            *parents, leaf = path.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        pipeline["data"] = {"format": "verl", **pipeline.get("data", {})}
        pipeline["resources"] = {
            POOLS["local"]: {"type": "local", "device": "gpu", **self.pools["local"]},
            POOLS["cpu"]: {"type": "cpu", **self.pools["cpu"]},
        }
        for pool in self.models.pools:  # a model's pool of its own: the actor's kind of pool
            pipeline["resources"][pool] = {"type": "local", "device": pipeline["resources"][ACTOR_POOL]["device"]}
        if any(stage["on"] == ROLLOUT_POOL for stage in stages):
            pipeline["resources"][ROLLOUT_POOL] = {"type": "local", "device": "gpu", **self._rollout_pool()}
            self.changed(
                "trainer.v1.trainer_mode=separate_async: generate runs on a pool of its own, rollout_pool "
                "(actor_rollout_ref.rollout.n_gpus_per_node x nnodes)"
            )
        pipeline["stages"] = stages
        return pipeline

    def _rollout_pool(self) -> dict[str, int]:
        """verl's standalone rollout: ``actor_rollout_ref.rollout.n_gpus_per_node`` x ``nnodes``."""
        pool = {}
        for key, name in (("n_gpus_per_node", "gpus_per_node"), ("nnodes", "nnodes")):
            value = self.cfg.get(f"actor_rollout_ref.rollout.{key}")
            if isinstance(value, int) and value > 0:
                pool[name] = value
                self.consumed.add(f"actor_rollout_ref.rollout.{key}")
        return pool

    def _name(self) -> str:
        raw = str(self.fields.get("name") or "verl-import")
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-") or "verl-import"
        name = name if name[0].isalpha() else f"verl-{name}"
        if name != raw:
            self.changed(f"trainer.project_name={raw}: the pipeline name is {name} ({NAME_PATTERN})")
        return name

    # ---- what did not carry over -------------------------------------------------------------
    def _list_dropped(self) -> None:
        for key, value in self.cfg.set_keys.items():
            if key in self.consumed:
                continue
            name = BY_VERL.get(key)
            if key.startswith("critic.") and not self.uses_critic:
                why = f"no critic is trained ({self._why_no_critic()}), so verl ignores it too"
            elif ignored_because(key, self.cfg):
                why = ignored_because(key, self.cfg)
            elif name is not None and name.place in ("project", "command"):
                why = _elsewhere(name, value)
            elif name is not None:
                why = f"{name.hint()}, which this pipeline does not use"
            else:
                why = why_not(key) or "rlflow has no such setting"
            self.drop(f"{key}: {show(value)}: {why}")

    # ---- the result must be a pipeline rlflow takes ------------------------------------------
    def _validate(self, pipeline: dict) -> None:
        for stage in pipeline["stages"]:
            model = STAGE_KINDS.get(stage["uses"]).config_model
            if model is not None:
                self._schema(model, stage.get("with", {}), f"stages.{stage['uses']}.with.")
        self._schema(Pipeline, pipeline, "")
        for path, value in _strings(pipeline):
            if re.search(r"\{[{%#]", value):
                self._problem(
                    self._origin(path) or path,
                    "pipeline files are Jinja2 templates: '{{', '{%' and '{#' would be read as one",
                )

    def _schema(self, model: type[BaseModel], data: dict, prefix: str) -> None:
        try:
            model.model_validate(data)
        except ValidationError as exc:
            for err in exc.errors():
                where = prefix + ".".join(str(p) for p in clean_loc(tuple(err["loc"]), data))
                key = self._origin(where)
                if (key is None and self.problems) or any(d.path == key for d in self.problems):
                    continue  # follows from a value already refused (which left a gap here)
                rlflow_name = BY_VERL[key].where if key in BY_VERL else where
                self._problem(key or where, f"rlflow's {rlflow_name} {err['msg'].replace('Input should', 'should')}")

    def _origin(self, path: str) -> str | None:
        """The verl key the value at rlflow ``path`` came from (None for a value of rlflow's own)."""
        for rlflow_path, verl_key in sorted(self.out.origins.items(), key=lambda kv: -len(kv[0])):
            if path == rlflow_path or path.startswith(rlflow_path + "."):
                return verl_key
        return None


def verl_uses_critic(cfg: VerlConfig) -> bool:
    """verl's ``need_critic``: ``critic.enable`` when set, else whether the estimator is gae."""
    enable = cfg.get("critic.enable")
    return bool(enable) if enable is not None else cfg.get("algorithm.adv_estimator") == "gae"


def _is_critic(name: VerlName) -> bool:
    return name.rlflow.startswith("critic.") if name.place == "field" else name.owner in CRITIC_KINDS


def _place(name: VerlName) -> str:
    """The pipeline path a field or stage knob lands on (stages by kind)."""
    return name.rlflow if name.place == "field" else f"stages.{name.owner}.with.{name.rlflow}"


def _equal(a: Any, b: Any) -> bool:
    """Equal as YAML would write them (a tuple default and a list value alike)."""
    return (list(a) if isinstance(a, tuple) else a) == (list(b) if isinstance(b, tuple) else b)


def _targets() -> dict[tuple, list[VerlName]]:
    """The pipeline places the table fills, each with its verl keys in the table's order."""
    targets: dict[tuple, list[VerlName]] = {}
    for name in VERL_NAMES:
        # the reward function and the multi_turn block are converted whole (_reward, _multi_turn)
        multi_turn = name.verl.startswith(f"{ROLLOUT}.multi_turn.")
        # the models' blocks too (rlflow.importers.verl_models)
        model = name.place == "field" and name.rlflow.startswith(("reward_model.", "distillation."))
        if (
            name.place in ("field", "stage", "pool")
            and name.owner != "reward_function"
            and not multi_turn
            and not model
        ):
            targets.setdefault((name.place, name.owner, name.rlflow), []).append(name)
    return targets


def _elsewhere(name: VerlName, value: Any) -> str:
    """What to do instead for a verl key whose counterpart is in rlflow.yaml or on the command line."""
    note = f" ({name.note})" if name.note else ""
    if name.verl == "trainer.logger":
        sinks = [s for s in (value if isinstance(value, list) else [value]) if s in SINKS]
        return f"set `logging: {{sinks: [{', '.join(sinks)}]}}` in rlflow.yaml"
    if name.place == "project":
        return f"set {name.rlflow} in rlflow.yaml{note}"
    return f"use `{name.rlflow}`{note}"


def _strings(value: Any, path: str = ""):
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _strings(child, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):  # the stages: named by kind, as the origins name them
        for child in value:
            yield from _strings(
                child, f"{path}.{child['uses']}" if isinstance(child, dict) and "uses" in child else path
            )
    elif isinstance(value, str):
        yield path, value
