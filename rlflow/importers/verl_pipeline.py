"""Turn a composed verl GRPO config into an rlflow pipeline, and say what did not carry over.

``convert(VerlConfig)`` builds the pipeline of one GRPO step as verl's ``PPOTrainerSync`` runs
it (generate, reward, old_log_prob, ref_log_prob when a KL term is on, advantage, update_actor,
sync_weights; validation when verl would validate) on a ``local`` GPU pool sized by
``trainer.n_gpus_per_node`` x ``trainer.nnodes`` and a ``cpu`` reward pool, and fills every knob
through the table of ``rlflow.schemas.verl_names`` (the one the validator's errors use).

Design decisions:
- Every knob that has a counterpart is written out with verl's resolved value, defaults
  included: verl's defaults differ from rlflow's (``rollout.n`` 1, ``ppo_mini_batch_size`` 256),
  and the pipeline must run what verl would.
- Several verl keys may feed one rlflow field (``optim.clip_grad`` and the older
  ``actor.grad_clip``; a deprecated global batch size and its per-GPU successor): a key the user
  set wins over one left at its default, and the table's order decides between equals.
- A value rlflow cannot take (``adv_estimator: gae``, ``rollout.name: sglang``) is an error naming
  the verl key; so is one that the pipeline schema or a stage's ``with:`` model refuses, traced
  back to the verl key it came from. All of them are reported at once.
- Keys the user set that have no counterpart are listed (key, value, why), never silently
  dropped; so are conversions whose meaning shifts (a global batch size made per worker, a Hub
  model id where rlflow needs a directory), and what verl does with a value that rlflow does the same
  way but a user may not expect (a batch that is not a multiple of the mini-batch). A key is listed
  once: one shown as converted is never also shown as not carried over. Untouched verl defaults
  are not listed.
- Without a custom reward function the reward is verl's own ``default_compute_score`` (it has
  verl's reward signature), so rows score as verl would score them.
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
from rlflow.importers.verl_values import SKIP, Unsupported, convert_value, show
from rlflow.schemas.diagnostics import short_repr
from rlflow.schemas.pipeline import NAME_PATTERN, Pipeline
from rlflow.schemas.schema_errors import clean_loc
from rlflow.schemas.verl_names import BY_VERL, ROLLOUT, VERL_NAMES, VerlName, why_not
from rlflow.stages import STAGE_KINDS
from rlflow.tools.config import IGNORED, MultiTurnConfig

VERL_DEFAULT_REWARD = "verl.utils.reward_score:default_compute_score"
ACTOR_POOL, REWARD_POOL, ROLLOUT_POOL = "actor_pool", "reward_pool", "rollout_pool"
POOLS = {"local": ACTOR_POOL, "cpu": REWARD_POOL}  # pool type -> its name in the pipeline
SINKS = {"console", "wandb", "tensorboard", "mlflow"}  # verl logger names rlflow.yaml logging.sinks takes
# the step, in verl's order: (stage name, kind, resource)
STEP = (
    ("generate", "generate", ACTOR_POOL),
    ("reward", "reward_function", REWARD_POOL),
    ("old_log_prob", "old_log_prob", ACTOR_POOL),
    ("ref_log_prob", "ref_log_prob", ACTOR_POOL),
    ("advantage", "grpo_advantage", "driver"),
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

    def run(self) -> Conversion:
        for target, names in _targets().items():
            self._fill(target, names)
        self._mini_batches()
        self._multi_turn()
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
            self._put(name, value)
            self.consumed.update(n.verl for n in names)
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

    def _mini_batches(self) -> None:
        """verl 0.9.1 pads a batch that is not a multiple of the mini-batch (its last mini-batch is
        shorter, as rlflow runs it) and refuses a mini-batch larger than the batch."""
        batch, mini = self.fields.get("trainer.train_batch_size"), self.fields.get("trainer.ppo_mini_batch_size")
        if not isinstance(batch, int) or not isinstance(mini, int) or batch <= 0 or mini <= 0:
            return  # a bad value is refused by the schema, naming its key
        key = self.out.origins["trainer.ppo_mini_batch_size"]
        if batch < mini:
            self._problem(
                key,
                f"a mini-batch larger than data.train_batch_size {batch} (verl refuses it too)",
                f"set {key} to at most {batch}",
            )
        elif batch % mini:
            full, rest = divmod(batch, mini)
            self.out.notes.append(
                f"{key}={mini}: data.train_batch_size {batch} is not a multiple, so each update takes {full} "
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
            if (kind == "ref_log_prob" and not uses_kl) or (kind == "validate" and not validates):
                unused = {n.verl for n in VERL_NAMES if n.owner == kind}  # listed once: as not carried over
                self.consumed.difference_update(unused)
                self.out.changed = [line for line in self.out.changed if line.partition("=")[0] not in unused]
                continue
            stage = {"name": name, "uses": kind, "on": resource}
            if self.withs.get(kind):
                stage["with"] = self.withs[kind]
            stages.append(stage)
        return stages

    def _reward(self) -> dict:
        """verl moves a legacy ``custom_reward_function`` with any value set over ``reward.custom_reward_function``."""
        self.consumed.update(n.verl for n in VERL_NAMES if n.owner == "reward_function")
        for key in ("reward_model.enable", "reward.reward_model.enable"):
            if self.cfg.get(key):
                self._problem(
                    key,
                    "rlflow has no model-based reward",
                    "score with a reward function, or a reward stage kind of your own (docs/pipeline_format.md#stages)",
                )
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
            if name is not None and name.place in ("project", "command"):
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


def _targets() -> dict[tuple, list[VerlName]]:
    """The pipeline places the table fills, each with its verl keys in the table's order."""
    targets: dict[tuple, list[VerlName]] = {}
    for name in VERL_NAMES:
        # the reward function and the multi_turn block are converted whole (_reward, _multi_turn)
        multi_turn = name.verl.startswith(f"{ROLLOUT}.multi_turn.")
        if name.place in ("field", "stage", "pool") and name.owner != "reward_function" and not multi_turn:
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
