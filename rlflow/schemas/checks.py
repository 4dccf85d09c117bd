"""Semantic checks: the rules a pipeline must follow beyond its schema, all collected at once.

Each check looks at a ``Subject`` (the parts of the pipeline that parsed) and reports
through a ``Reporter``, which positions every problem in the file. Checks are written so
that a part that failed to parse silences the rules that depend on it instead of causing
false alarms, which lets one run report schema errors and rule errors together.

Rules: stages name declared resources and registered kinds; each ``with:`` fits its kind's
config model; a kind runs only on resource types it allows; stage names are unique; the
GRPO stages are all there (a reward stage is any kind timed as verl's ``reward``);
``ref_log_prob`` is present exactly when the algorithm needs a reference policy; batch
sizes divide the way verl needs; new weights can reach the rollout; remote backends are
registered; resources fit the inventory (``fit.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from rlflow.schemas.diagnostics import Diagnostic, format_path, parse_path, suggestion
from rlflow.schemas.pipeline import DRIVER, AlgorithmSpec, Pipeline, StageSpec, TrainerSpec
from rlflow.schemas.validation import validation_diagnostics
from rlflow.schemas.yaml_loader import Positions

REQUIRED_KINDS = ("generate", "old_log_prob", "grpo_advantage", "update_actor", "sync_weights")
REWARD_TIMER = "reward"


@dataclass
class Subject:
    """The parts of a pipeline that parsed; ``spec`` is set only when all of it did."""

    stages: list[tuple[int, StageSpec]]
    resources: dict[str, Any]
    resource_names: set[str] | None  # every declared name, parsed or not; None when `resources` is broken
    algorithm: AlgorithmSpec | None
    trainer: TrainerSpec | None
    stages_complete: bool
    spec: Pipeline | None = None
    configs: dict[int, Any] = field(default_factory=dict)  # stage index -> parsed `with:` config

    def kind_of(self, stage: StageSpec):
        from rlflow.stages import STAGE_KINDS

        return STAGE_KINDS.get(stage.uses) if stage.uses in STAGE_KINDS else None

    def resource_type(self, name: str) -> str | None:
        if name == DRIVER:
            return DRIVER
        res = self.resources.get(name)
        return res.type if res is not None else None


class Reporter:
    """Builds positioned diagnostics for one file."""

    def __init__(self, file: str, positions: Positions) -> None:
        self.file, self.positions = file, positions
        self.diagnostics: list[Diagnostic] = []

    def __call__(self, path: tuple, message: str, fix: str = "", at: str = "value") -> None:
        line, col = self.positions.locate(path, at)
        self.diagnostics.append(Diagnostic(self.file, line, col, format_path(path), message, fix))


def run_checks(subject: Subject, report: Reporter, project=None) -> None:
    """Every rule, in file order; ``project`` (a ProjectConfig) brings the inventory."""
    check_stages(subject, report)
    if subject.stages_complete:
        check_required_kinds(subject, report)
        check_reference(subject, report)
    check_batch_sizes(subject, report)
    check_weight_path(subject, report)
    check_training_engines(subject, report)
    check_remote_backends(subject, report)
    if project is not None and project.inventory is not None:
        from rlflow.schemas.fit import check_inventory

        check_inventory(subject, project.inventory, report)
    if subject.spec is not None:
        check_dataflow(subject.spec, report)


def check_stages(subject: Subject, report: Reporter) -> None:
    from rlflow.stages import STAGE_KINDS

    names: dict[str, int] = {}
    for i, stage in subject.stages:
        where = ("stages", i)
        if stage.name in names:
            report(where + ("name",), f"duplicate stage name {stage.name!r} (also stages[{names[stage.name]}])",
                   "give each stage its own name")
        names.setdefault(stage.name, i)
        if subject.resource_names is not None and stage.on not in subject.resource_names | {DRIVER}:
            declared = sorted(subject.resource_names)
            report(where + ("on",), f"unknown resource {stage.on!r}",
                   suggestion(stage.on, declared + [DRIVER]) or f"declared: {', '.join(declared) or 'none'}, or driver")
        kind = subject.kind_of(stage)
        if kind is None:
            known = STAGE_KINDS.names()
            report(where + ("uses",), f"unknown stage kind {stage.uses!r}; known kinds: {', '.join(known)}",
                   suggestion(stage.uses, known))
            continue
        _check_stage_config(subject, i, stage, kind, report)
        rtype = subject.resource_type(stage.on)
        if rtype is not None and rtype not in kind.allowed_on:
            place = "the driver" if rtype == DRIVER else f"{rtype} resource {stage.on!r}"
            report(where + ("on",), f"stage kind {stage.uses!r} cannot run on {place}",
                   f"it runs on: {', '.join(sorted(kind.allowed_on))}")
        if subject.spec is not None:
            for sub, message in kind.check(subject.spec, stage):
                report(where + parse_path(sub), message)


def _check_stage_config(subject: Subject, i: int, stage: StageSpec, kind, report: Reporter) -> None:
    try:
        subject.configs[i] = kind.parse_config(stage.with_)
    except ValidationError as exc:
        report.diagnostics += validation_diagnostics(
            exc, kind.config_model, stage.with_, report.positions, report.file, ("stages", i, "with")
        )
        return
    engine = getattr(subject.configs[i], "engine", None)  # only some kinds choose an engine
    if engine and subject.resource_type(stage.on) == "local":  # a remote backend brings its own engines
        from rlflow.backends.local.engines import missing_extra  # pure: finds packages without importing them

        missing = missing_extra(engine)
        if missing:
            report(("stages", i, "with", "engine"), missing, "or pick engine: torch")


def _kinds_present(subject: Subject) -> dict[str, list[tuple[int, StageSpec]]]:
    present: dict[str, list] = {}
    for i, stage in subject.stages:
        present.setdefault(stage.uses, []).append((i, stage))
    return present


def check_required_kinds(subject: Subject, report: Reporter) -> None:
    present = _kinds_present(subject)
    unknown = [s.uses for _, s in subject.stages if subject.kind_of(s) is None]
    for kind in REQUIRED_KINDS:
        if kind not in present and not any(suggestion(u, [kind]) for u in unknown):
            report(("stages",), f"no {kind!r} stage; a GRPO step needs one",
                   f"add - {{name: {kind}, uses: {kind}, on: <resource>}}", at="key")
    rewards = [s for _, s in subject.stages if (k := subject.kind_of(s)) is not None and k.verl_timer == REWARD_TIMER]
    if not rewards and not unknown:
        report(("stages",), "no reward stage (a stage kind timed as verl's 'reward', such as text2sql_reward)",
               "add - {name: reward, uses: text2sql_reward, on: <cpu pool or driver>}", at="key")


def check_reference(subject: Subject, report: Reporter) -> None:
    algo = subject.algorithm
    if algo is None:
        return
    refs = _kinds_present(subject).get("ref_log_prob", [])
    flags = [f for f in ("use_kl_loss", "use_kl_in_reward") if getattr(algo, f)]
    if flags and not refs:
        report(("algorithm", flags[0]), f"{' and '.join(flags)} {'is' if len(flags) == 1 else 'are'} true, "
               "but no stage computes reference log-probs",
               f"add - {{name: ref_log_prob, uses: ref_log_prob, on: <actor pool>}}, or set {flags[0]}: false")
    if refs and not flags:
        for i, stage in refs:
            report(("stages", i, "uses"), f"stage {stage.name!r} computes reference log-probs, but "
                   "algorithm.use_kl_loss and algorithm.use_kl_in_reward are both false, so nothing reads them",
                   "remove the stage, or set algorithm.use_kl_loss: true")


def data_parallel_size(resource) -> int:
    """Workers an update is split over: every device of a local pool; one for a remote backend."""
    return resource.gpus_per_node * resource.nnodes if resource.type == "local" else 1


def _samples_per_prompt(subject: Subject) -> int | None:
    for i, stage in subject.stages:
        config = subject.configs.get(i)
        if stage.uses == "generate" and config is not None and config.n:
            return config.n  # the generate stage's own n overrides algorithm.n
    return subject.algorithm.n if subject.algorithm is not None else None


def check_batch_sizes(subject: Subject, report: Reporter) -> None:
    t, n = subject.trainer, _samples_per_prompt(subject)
    if t is None:
        return
    if t.train_batch_size % t.ppo_mini_batch_size:
        fit = max(d for d in range(1, t.ppo_mini_batch_size + 1) if t.train_batch_size % d == 0)
        report(("trainer", "ppo_mini_batch_size"), f"train_batch_size {t.train_batch_size} is not a multiple of "
               f"ppo_mini_batch_size {t.ppo_mini_batch_size}", f"use a divisor of {t.train_batch_size}, such as {fit}")
    if n is None:
        return
    for _, stage in _kinds_present(subject).get("update_actor", []):
        res = subject.resources.get(stage.on)
        if res is None or res.type not in ("local", "remote"):
            continue
        dp, samples = data_parallel_size(res), t.ppo_mini_batch_size * n
        if samples % dp:
            report(("trainer", "ppo_mini_batch_size"),
                   f"a mini-batch of ppo_mini_batch_size {t.ppo_mini_batch_size} x n {n} = {samples} samples does not "
                   f"split evenly over the {dp} data-parallel workers of {stage.on!r}",
                   f"make ppo_mini_batch_size x n a multiple of {dp}")
        elif t.ppo_micro_batch_size and (samples // dp) % t.ppo_micro_batch_size:
            per = samples // dp
            report(("trainer", "ppo_micro_batch_size"),
                   f"each of the {dp} workers of {stage.on!r} gets {per} samples per mini-batch "
                   f"({t.ppo_mini_batch_size} x n {n} / {dp}), not a multiple of ppo_micro_batch_size "
                   f"{t.ppo_micro_batch_size}", f"use a divisor of {per}")


def check_weight_path(subject: Subject, report: Reporter) -> None:
    """sync_weights runs where the actor trains; every rollout can receive those weights."""
    updates = _kinds_present(subject).get("update_actor", [])
    if len(updates) != 1 or subject.resource_type(updates[0][1].on) is None:
        return
    actor = updates[0][1].on
    actor_type = subject.resource_type(actor)
    for i, stage in subject.stages:
        kind = subject.kind_of(stage)
        if kind is None:
            continue
        if stage.uses == "sync_weights" and stage.on != actor:
            report(("stages", i, "on"), f"sync_weights runs on {stage.on!r} but update_actor trains on {actor!r}; "
                   "weights are synced from where the actor trains", f"set on: {actor}")
        elif "rollout_weights" in kind.reads_fields and stage.on != actor:
            rtype = subject.resource_type(stage.on)
            if rtype is None or (rtype == "local" and actor_type == "local"):
                continue  # two local pools: the runtime syncs across pools
            report(("stages", i, "on"),
                   f"{stage.uses} runs on {_describe(stage.on, rtype)} but update_actor trains on "
                   f"{_describe(actor, actor_type)}, so the new weights cannot reach this rollout: "
                   "a remote backend syncs weights only within itself",
                   f"run {stage.uses} on {actor!r}" + (", or both on local pools" if actor_type == "local" else ""))


def check_training_engines(subject: Subject, report: Reporter) -> None:
    """The actor's log-probs run in its training engine: a DeepSpeed old_log_prob needs a DeepSpeed update."""
    engines = {stage.uses: (i, subject.configs.get(i)) for i, stage in subject.stages
               if stage.uses in ("old_log_prob", "update_actor")}
    (i, log_prob), (_, update) = engines.get("old_log_prob", (0, None)), engines.get("update_actor", (0, None))
    if log_prob is not None and update is not None and log_prob.engine == "deepspeed" != update.engine:
        report(("stages", i, "with", "engine"), f"old_log_prob runs on deepspeed but update_actor on {update.engine}",
               "the actor's log-probs run in its training engine: set both to deepspeed, or both to torch")


def _describe(name: str, rtype: str | None) -> str:
    return {"local": f"local pool {name!r}", "remote": f"remote backend {name!r}"}.get(rtype or "", f"{name!r}")


def check_remote_backends(subject: Subject, report: Reporter) -> None:
    remotes = {name: res for name, res in subject.resources.items() if res.type == "remote"}
    if not remotes:
        return
    from rlflow.backends.remote.registry import REMOTE_BACKENDS
    for name, res in remotes.items():
        if res.backend not in REMOTE_BACKENDS:
            known = REMOTE_BACKENDS.names()
            report(("resources", name, "backend"),
                   f"unknown remote backend {res.backend!r}; registered: {', '.join(known) or 'none'}",
                   suggestion(res.backend, known) or "load a backend plugin through plugins: in rlflow.yaml")
        elif REMOTE_BACKENDS.get(res.backend).single_forwarder and res.forwarders != 1:
            report(("resources", name, "forwarders"),
                   f"remote backend {res.backend!r} takes a single forwarder; got forwarders: {res.forwarders}",
                   "set forwarders: 1")


def check_dataflow(spec: Pipeline, report: Reporter) -> None:
    from rlflow.plan.compile import dataflow_problems

    for dotted, message in dataflow_problems(spec):
        report(parse_path(dotted), message)
