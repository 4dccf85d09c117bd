"""Semantic rules: what a pipeline must follow beyond its schema, all collected at once.

Each rule looks at a ``Subject`` and reports through a ``Reporter``; a part that failed to parse silences the
rules that depend on it. Stages are found by role, never by kind name. Design notes: docs/design/check.md.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from rlflow.backends.local.factory import missing_extra
from rlflow.check import paths
from rlflow.check.algorithm import check_algorithm
from rlflow.check.critic import check_critic
from rlflow.check.critic import fields_reported as critic_fields_reported
from rlflow.check.engines import engine_choice_of
from rlflow.check.fit import check_inventory
from rlflow.check.model_blocks import check_model_blocks
from rlflow.check.model_blocks import dataflow_reported as model_dataflow_reported
from rlflow.check.multi_turn import check_multi_turn
from rlflow.plan.compile import dataflow_problems
from rlflow.schemas.diagnostics import parse_path, suggestion
from rlflow.schemas.pipeline import DRIVER, TEXT2SQL_FORMATS, Pipeline, StageSpec, data_parallel_size
from rlflow.schemas.project import load_project_config
from rlflow.schemas.schema_errors import validation_diagnostics
from rlflow.schemas.subject import Reporter, Subject
from rlflow.stages import STAGE_KINDS, StageKind
from rlflow.stages.registry import BUILTIN_FOR_ROLE

REQUIRED_ROLES = ("rollout", "reward", "log_prob", "advantage", "update", "weight_sync")
KEEPS_ROLLOUT_LOG_PROBS = ("torch",)  # the local generation engines that return rollout_log_probs


def kind_of(stage: StageSpec) -> type[StageKind] | None:
    return STAGE_KINDS.get(stage.uses) if stage.uses in STAGE_KINDS else None


def run_checks(subject: Subject, report: Reporter, project=None, *, check_paths: bool = False) -> None:
    """Every rule, in file order; ``project`` (a ProjectConfig) brings the inventory and the root that
    relative paths resolve against; ``check_paths``: the data and model paths must exist (``paths``)."""
    project_or_default = project or load_project_config()
    check_stages(subject, report, project_or_default.root)
    if subject.stages_complete:
        check_required_kinds(subject, report)
        check_reference(subject, report)
    check_clip_ratio(subject, report)
    check_rollout_log_probs(subject, report)
    check_multi_turn(subject, report)
    check_algorithm(subject, report)
    check_critic(subject, report)
    check_model_blocks(subject, report, project_or_default.resolve)
    check_batch_sizes(subject, report)
    check_weight_path(subject, report)
    check_trainer_mode(subject, report)
    check_training_engines(subject, report)
    check_remote_backends(subject, report)
    if project is not None and project.inventory is not None:
        check_inventory(subject, project.inventory, report, project.resolve)
    if subject.spec is not None:
        check_dataflow(subject.spec, report)
        check_unused_resources(subject.spec, report)
        check_data_fields(subject.spec, report)
        check_token_budgets(subject.spec, report)
        if check_paths:
            paths.check_paths(subject.spec, project_or_default, report)


def check_stages(subject: Subject, report: Reporter, root: Path) -> None:
    """Names, resources and kinds of the stages, each ``with:`` against its kind, and each kind's own rules
    (``check_in_project``, with the project ``root`` that relative paths in ``with:`` start from)."""
    names: dict[str, int] = {}
    for i, stage in subject.stages:
        where = ("stages", i)
        if stage.name in names:
            report(
                where + ("name",),
                f"duplicate stage name {stage.name!r} (also stages[{names[stage.name]}])",
                "give each stage its own name",
            )
        names.setdefault(stage.name, i)
        if subject.resource_names is not None and stage.on not in subject.resource_names | {DRIVER}:
            declared = sorted(subject.resource_names)
            report(
                where + ("on",),
                f"unknown resource {stage.on!r}",
                suggestion(stage.on, declared + [DRIVER]) or f"declared: {', '.join(declared) or 'none'}, or driver",
            )
        kind = kind_of(stage)
        if kind is None:
            known = STAGE_KINDS.names()
            report(
                where + ("uses",),
                f"unknown stage kind {stage.uses!r}; known kinds: {', '.join(known)}",
                suggestion(stage.uses, known),
            )
            continue
        _check_stage_config(subject, i, stage, kind, report)
        rtype = subject.resource_type(stage.on)
        if rtype is not None and rtype not in kind.allowed_on:
            place = "the driver" if rtype == DRIVER else f"{rtype} resource {stage.on!r}"
            report(
                where + ("on",),
                f"stage kind {stage.uses!r} cannot run on {place}",
                f"it runs on: {', '.join(sorted(kind.allowed_on))}",
            )
        if subject.spec is not None:
            for sub, *problem in kind.check_in_project(subject.spec, stage, root):
                report(where + parse_path(sub), *problem)


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
        missing = missing_extra(engine)
        if missing:
            report(("stages", i, "with", "engine"), missing, "or pick engine: torch")


def with_role(subject: Subject, role: str) -> list[tuple[int, StageSpec]]:
    """The (index, stage) pairs whose kind has ``role``."""
    return [(i, stage) for i, stage in subject.stages if (kind := kind_of(stage)) is not None and kind.role == role]


def check_required_kinds(subject: Subject, report: Reporter) -> None:
    unknown = [s.uses for _, s in subject.stages if kind_of(s) is None]
    bypass = subject.algorithm is not None and subject.algorithm.rollout_correction.bypass_mode
    for role in REQUIRED_ROLES:
        if role == "log_prob" and bypass:
            continue  # the rollout's own log-probs are the old policy's
        builtin = BUILTIN_FOR_ROLE[role]
        if role == "reward" and with_role(subject, "reward_model"):
            continue  # a model reward stage alone writes the step's scores (rlflow.stages.model_scores)
        if (
            not with_role(subject, role)
            and not any(suggestion(u, [builtin]) for u in unknown)
            and (role != "reward" or not unknown)
        ):
            report(
                ("stages",),
                f"no {role} stage (a stage kind whose role is {role!r}, such as {builtin}); a GRPO step needs one",
                f"add - {{name: {builtin}, uses: {builtin}, on: <resource>}}",
                at="key",
            )


def check_reference(subject: Subject, report: Reporter) -> None:
    algo = subject.algorithm
    if algo is None:
        return
    refs = with_role(subject, "reference")
    flags = [f for f in ("use_kl_loss", "use_kl_in_reward") if getattr(algo, f)]
    if flags and not refs:
        report(
            ("algorithm", flags[0]),
            f"{' and '.join(flags)} {'is' if len(flags) == 1 else 'are'} true, "
            "but no stage computes reference log-probs",
            f"add - {{name: ref_log_prob, uses: {BUILTIN_FOR_ROLE['reference']}, on: <actor pool>}}, "
            f"or set {flags[0]}: false; from the command line: --set algorithm.{flags[0]}=false",
        )
    if refs and not flags:
        for i, stage in refs:
            report(
                ("stages", i, "uses"),
                f"stage {stage.name!r} computes reference log-probs, but "
                "algorithm.use_kl_loss and algorithm.use_kl_in_reward are both false, so nothing reads them",
                "remove the stage, or set algorithm.use_kl_loss: true",
            )


def check_rollout_log_probs(subject: Subject, report: Reporter) -> None:
    """A rollout correction reads the rollout's log-probs: every rollout must keep them.

    Of the local generation engines only ``torch`` keeps them (``hf`` would have to keep every
    step's full-vocabulary scores; rlflow's vLLM rollout does not ask for them). A remote backend
    may or may not: the run checks its first generate's output and stops there if they are missing.
    """
    algo = subject.algorithm
    if algo is None or not algo.rollout_correction.active:
        return
    for i, stage in with_role(subject, "rollout"):
        engine = getattr(subject.configs.get(i), "engine", KEEPS_ROLLOUT_LOG_PROBS[0])
        where = subject.resource_type(stage.on)
        if where == "remote":
            report.warn(
                ("stages", i, "on"),
                f"algorithm.rollout_correction reads the rollout's log-probs: the remote backend behind {stage.on!r} "
                "must return rollout_log_probs from generate (the run stops at the first step otherwise)",
                "the reference backend's torch engine returns them",
            )
        elif engine not in KEEPS_ROLLOUT_LOG_PROBS:
            report(
                ("stages", i, "with", "engine"),
                f"algorithm.rollout_correction reads the rollout's log-probs, and the {engine} generation engine "
                f"does not keep them (only {', '.join(KEEPS_ROLLOUT_LOG_PROBS)} does)",
                "set engine: torch on this stage, or remove algorithm.rollout_correction's rollout_is, rollout_rs "
                "and bypass_mode",
            )


def check_clip_ratio(subject: Subject, report: Reporter) -> None:
    """Warn when an explicit ``clip_ratio`` is neither bound: verl's loss reads it only for a null bound.

    A ``clip_ratio`` equal to one bound says nothing the bounds do not (DAPO's 0.2 beside
    ``clip_ratio_low: 0.2, clip_ratio_high: 0.28``). The advice never moves an asymmetric pair of
    bounds: that would undo a clip-higher the user chose.
    """
    algo = subject.algorithm
    if algo is None or "clip_ratio" not in algo.model_fields_set:
        return
    low, high, ratio = algo.clip_ratio_low, algo.clip_ratio_high, algo.clip_ratio
    if low is None or high is None or ratio in (low, high):
        return
    if low == high:
        fix = f"set clip_ratio_low: {ratio} and clip_ratio_high: {ratio} instead"
    else:
        fix = (
            "remove clip_ratio (the two bounds are what the loss uses), or set a bound to null to use clip_ratio there"
        )
    report.warn(
        ("algorithm", "clip_ratio"),
        f"clip_ratio {ratio} is ignored, as in verl: the loss clips the ratio to "
        f"[1 - clip_ratio_low, 1 + clip_ratio_high] = [1 - {low}, 1 + {high}], and clip_ratio only stands in "
        "for a bound that is null",
        fix,
    )


def _samples_per_prompt(subject: Subject) -> int | None:
    for i, _ in with_role(subject, "rollout"):
        config = subject.configs.get(i)
        if config is not None and getattr(config, "n", None):
            return config.n  # the rollout stage's own n overrides algorithm.n
    return subject.algorithm.n if subject.algorithm is not None else None


def check_batch_sizes(subject: Subject, report: Reporter) -> None:
    t, n = subject.trainer, _samples_per_prompt(subject)
    if t is None:
        return
    if t.train_batch_size < t.ppo_mini_batch_size:
        report(
            ("trainer", "ppo_mini_batch_size"),
            f"train_batch_size {t.train_batch_size} is smaller than ppo_mini_batch_size {t.ppo_mini_batch_size} "
            "(verl refuses this too)",
            f"set ppo_mini_batch_size to at most {t.train_batch_size}",
        )
    elif t.train_batch_size % t.ppo_mini_batch_size:
        full, rest = divmod(t.train_batch_size, t.ppo_mini_batch_size)
        fit = max(d for d in range(1, t.ppo_mini_batch_size + 1) if t.train_batch_size % d == 0)
        report.warn(
            ("trainer", "ppo_mini_batch_size"),
            f"train_batch_size {t.train_batch_size} is not a multiple of ppo_mini_batch_size {t.ppo_mini_batch_size}: "
            f"as in verl 0.9.1, each epoch of an update takes {full} mini-batches of {t.ppo_mini_batch_size} prompts "
            f"and a last one of {rest} (verl pads it with no-op samples that add nothing to the loss)",
            f"for mini-batches of one size, use a divisor of {t.train_batch_size}, such as {fit}",
        )
    if n is None:
        return
    for _, stage in with_role(subject, "update"):
        res = subject.resources.get(stage.on)
        if res is None or res.type not in ("local", "remote"):
            continue
        dp, samples = data_parallel_size(res), t.ppo_mini_batch_size * n
        if samples % dp:
            report(
                ("trainer", "ppo_mini_batch_size"),
                f"a mini-batch of ppo_mini_batch_size {t.ppo_mini_batch_size} x n {n} = {samples} samples does not "
                f"split evenly over the {dp} data-parallel workers of {stage.on!r}",
                f"make ppo_mini_batch_size x n a multiple of {dp}",
            )
        elif t.ppo_micro_batch_size_per_gpu and (samples // dp) % t.ppo_micro_batch_size_per_gpu:
            per = samples // dp
            report(
                ("trainer", "ppo_micro_batch_size_per_gpu"),
                f"each of the {dp} workers of {stage.on!r} gets {per} samples per mini-batch "
                f"({t.ppo_mini_batch_size} x n {n} / {dp}), not a multiple of ppo_micro_batch_size_per_gpu "
                f"{t.ppo_micro_batch_size_per_gpu}",
                f"use a divisor of {per}",
            )


def check_token_budgets(spec: Pipeline, report: Reporter) -> None:
    """Warn when a token budget in use is below the longest row (max_prompt_length + max_response_length):
    verl refuses such a budget; rlflow gives a row over it a micro-batch of its own."""
    t = spec.trainer
    log_prob_dynamic = t.use_dynamic_bsz if t.log_prob_use_dynamic_bsz is None else t.log_prob_use_dynamic_bsz
    in_use = {
        "ppo_max_token_len_per_gpu": t.use_dynamic_bsz
        or (log_prob_dynamic and t.log_prob_max_token_len_per_gpu is None),
        "log_prob_max_token_len_per_gpu": log_prob_dynamic and t.log_prob_max_token_len_per_gpu is not None,
    }
    longest = spec.data.max_prompt_length + spec.data.max_response_length
    for name, used in in_use.items():
        budget = getattr(t, name)
        if used and budget < longest:
            report.warn(
                ("trainer", name),
                f"a row may hold max_prompt_length {spec.data.max_prompt_length} + max_response_length "
                f"{spec.data.max_response_length} = {longest} tokens, more than the budget of {budget}: such a row "
                "gets a micro-batch of its own (verl refuses this budget)",
                f"set {name} to at least {longest}",
            )


def check_weight_path(subject: Subject, report: Reporter) -> None:
    """The weight sync runs where the actor trains; every rollout can receive those weights."""
    updates = with_role(subject, "update")
    if len(updates) != 1 or subject.resource_type(updates[0][1].on) is None:
        return
    update, actor = updates[0][1].uses, updates[0][1].on
    actor_type = subject.resource_type(actor)
    for i, stage in subject.stages:
        kind = kind_of(stage)
        if kind is None:
            continue
        if kind.role == "weight_sync" and stage.on != actor:
            report(
                ("stages", i, "on"),
                f"{stage.uses} runs on {stage.on!r} but {update} trains on {actor!r}; "
                "weights are synced from where the actor trains",
                f"set on: {actor}",
            )
        elif "rollout_weights" in kind.reads_fields and stage.on != actor:
            rtype = subject.resource_type(stage.on)
            if rtype is None or (rtype == "local" and actor_type == "local"):
                continue  # two local pools: the runtime syncs across pools
            if rtype == "remote" and actor_type == "local":
                from rlflow.backends.remote.registry import REMOTE_BACKENDS

                backend = subject.resources[stage.on].backend
                if backend not in REMOTE_BACKENDS or REMOTE_BACKENDS.get(backend).accepts_rollout_weights:
                    continue  # the runtime pushes the weights to it (an unknown backend is reported already)
                why = f"remote backend {backend!r} cannot take weights from a local actor (no accepts_rollout_weights)"
            else:
                why = "a remote backend syncs weights only within itself"
            report(
                ("stages", i, "on"),
                f"{stage.uses} runs on {_describe(stage.on, rtype)} but {update} trains on "
                f"{_describe(actor, actor_type)}, so the new weights cannot reach this rollout: {why}",
                f"run {stage.uses} on {actor!r}" + (", or both on local pools" if actor_type == "local" else ""),
            )


OVERLAP_NEEDS = "rlflow runs a resource's stages one at a time, so a rollout and an update sharing one cannot overlap"


def check_trainer_mode(subject: Subject, report: Reporter) -> None:
    """``colocate_async`` is refused; ``separate_async`` needs the rollout on another resource than the update."""
    mode = subject.trainer.trainer_mode if subject.trainer is not None else "sync"
    if mode == "colocate_async":
        report(
            ("trainer", "trainer_mode"),
            f"trainer_mode colocate_async is not supported: {OVERLAP_NEEDS}",
            "bind generate to a resource of its own and set trainer_mode: separate_async",
        )
    if mode != "separate_async":
        return
    if subject.algorithm is not None and subject.algorithm.filter_groups.enable:
        report(
            ("algorithm", "filter_groups", "enable"),
            "dynamic sampling refills a step's batch before it trains, which trainer_mode separate_async does not "
            "do yet (it samples whole batches ahead of the trainer)",
            "set trainer_mode: sync with filter_groups, or turn filter_groups off",
        )
    actor = {stage.on for _, stage in with_role(subject, "update")}
    for i, stage in with_role(subject, "rollout"):
        if stage.on in actor:
            report(
                ("stages", i, "on"),
                f"trainer_mode separate_async runs {stage.name} ahead of the update, but both run on {stage.on!r}: "
                f"{OVERLAP_NEEDS}",
                f"bind {stage.name} to a resource of its own, or set trainer_mode: sync",
            )
    check_threshold_one(subject, report)


def check_threshold_one(subject: Subject, report: Reporter) -> None:
    """A warning with its cost: separate_async under ``max_off_policy_threshold: 1``, which lets a step train only
    on a batch sampled by the weights of the step before, and the rollout never has those while that step trains."""
    trainer = subject.trainer
    if trainer.max_off_policy_threshold != 1:
        return
    strategy = trainer.max_off_policy_strategy
    cost = {
        "drop": "every batch sampled while a step trains spans 2 versions and is dropped: each step generates two "
        "batches and waits for the second, slower than trainer_mode sync",
        "wait": "the rollout samples nothing ahead: each step waits for its whole batch, as trainer_mode sync does, "
        "with none of the overlap",
    }[strategy]
    report.warn(
        ("trainer", "max_off_policy_threshold"),
        f"max_off_policy_threshold 1 with trainer_mode separate_async admits only batches sampled by the weights "
        f"of the step before; with max_off_policy_strategy {strategy}, {cost}",
        "set max_off_policy_threshold: 2 (one step stale) or more, or trainer_mode: sync",
    )


def check_training_engines(subject: Subject, report: Reporter) -> None:
    """The engines chosen work together (``EngineChoice.problem``, which the runtime applies too)."""
    configs = {
        role: [(i, subject.configs.get(i)) for i, _ in with_role(subject, role)] for role in ("update", "log_prob")
    }
    if any(config is None for found in configs.values() for _, config in found):
        return  # a config that did not parse is reported already
    problem = engine_choice_of({role: [c for _, c in found] for role, found in configs.items()}).problem()
    if problem and configs["log_prob"]:
        message, _, fix = problem.partition(": ")
        report(("stages", configs["log_prob"][0][0], "with", "engine"), message, fix)


def _describe(name: str, rtype: str | None) -> str:
    return {"local": f"local pool {name!r}", "remote": f"remote backend {name!r}"}.get(rtype or "", f"{name!r}")


def check_remote_backends(subject: Subject, report: Reporter) -> None:
    remotes = {name: res for name, res in subject.resources.items() if res.type == "remote"}
    if not remotes:
        return
    from rlflow.backends.remote.registry import REMOTE_BACKENDS, forwarder_problem

    for name, res in remotes.items():
        if res.backend not in REMOTE_BACKENDS:
            known = REMOTE_BACKENDS.names()
            report(
                ("resources", name, "backend"),
                f"unknown remote backend {res.backend!r}; registered: {', '.join(known) or 'none'}",
                suggestion(res.backend, known) or "load a backend plugin through plugins: in rlflow.yaml",
            )
            continue
        cls = REMOTE_BACKENDS.get(res.backend)
        if problem := forwarder_problem(res.backend, cls.single_forwarder, res.forwarders):
            message, _, fix = problem.rpartition(" (")
            report(("resources", name, "forwarders"), message, fix.rstrip(")"))
        _check_backend_config(name, res.config, cls.config_model, report)


def _check_backend_config(name: str, config: dict, model, report: Reporter) -> None:
    """A remote resource's ``config:`` against its backend's ``config_model`` (None: the backend takes anything)."""
    if model is None:
        return
    try:
        model.model_validate(config)
    except ValidationError as exc:
        report.diagnostics += validation_diagnostics(
            exc, model, config, report.positions, report.file, ("resources", name, "config")
        )


def check_unused_resources(spec: Pipeline, report: Reporter) -> None:
    """A declared resource no stage runs on is not started: a warning, since it is often a stage moved away."""
    used = {stage.on for stage in spec.stages}
    for name in spec.resources:
        if name not in used:
            report.warn(
                ("resources", name),
                f"resource {name} runs no stage, so it is not started",
                f"remove it, or bind a stage to it with on: {name}",
                at="key",
            )


def check_dataflow(spec: Pipeline, report: Reporter) -> None:
    reported = [f"reads '{name}' but no stage produces it" for name in critic_fields_reported(spec)]
    reported += model_dataflow_reported(spec)  # check_model_blocks named both stages, with its fix
    for dotted, message in dataflow_problems(spec):
        if not any(text in message for text in reported):  # a rule said so, with its fix
            report(parse_path(dotted), message)


TEXT2SQL_ONLY = {
    "databases": "the databases of text-to-SQL records",
    "prompt_template": "the template that renders a text-to-SQL question",
}


def check_data_fields(spec: Pipeline, report: Reporter) -> None:
    """``data.databases`` and ``data.prompt_template`` are read only by the text-to-SQL formats."""
    data = spec.data
    if data.format in TEXT2SQL_FORMATS:
        return
    for name, what in TEXT2SQL_ONLY.items():
        if getattr(data, name) is not None:
            report(
                ("data", name),
                f"data.format {data.format} does not use data.{name} ({what}): "
                "its rows bring their own prompts, rendered by the tokenizer's chat template",
                f"remove data.{name}, or use a text-to-SQL format ({', '.join(TEXT2SQL_FORMATS)})",
                at="key",
            )
