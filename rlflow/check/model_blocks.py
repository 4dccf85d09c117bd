"""Rules for the models beside the policy: the ``reward_model:`` block and its stage (``rm_score`` or
``judge_score``), the ``distillation:`` block and ``teacher_log_prob``. Each block and the stage that uses it
must agree; the model sits where the block says; a teacher shares the student's vocabulary.
Design notes: docs/design/reward_models.md, docs/design/distillation.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from rlflow.assets import BUILTIN_PREFIX, builtin_path
from rlflow.schemas.pipeline import Pipeline, StageSpec
from rlflow.schemas.subject import Reporter, Subject
from rlflow.stages import STAGE_KINDS

MODEL_REWARD = "reward_model"  # the role of rm_score and judge_score
TEACHER = "teacher"  # the role of teacher_log_prob
ROUTING_KEY = "data_source"  # the only row field rlflow routes teachers by: the data loader's
OVERLAP_NEEDS = "rlflow runs a resource's stages one at a time"
Resolve = Callable[[str], Path]


def check_model_blocks(subject: Subject, report: Reporter, resolve: Resolve | None = None) -> None:
    """Every rule of both blocks; ``resolve`` (``ProjectConfig.resolve``) lets the teachers' tokenizers be read."""
    spec = subject.spec
    if spec is None:
        return  # a block or stage that did not parse is reported already
    scorers = _with_role(spec, MODEL_REWARD)
    teachers = _with_role(spec, TEACHER)
    check_reward_model(spec, scorers, report, complete=subject.stages_complete)
    check_distillation(spec, teachers, report, complete=subject.stages_complete)
    check_separate_async(spec, scorers + teachers, report)
    if resolve is not None and spec.distillation.enabled:
        check_teacher_vocabularies(spec, report, resolve)


def _with_role(spec: Pipeline, role: str) -> list[tuple[int, StageSpec]]:
    return [(i, s) for i, s in enumerate(spec.stages) if s.uses in STAGE_KINDS and STAGE_KINDS.get(s.uses).role == role]


def _actor_pool(spec: Pipeline) -> str | None:
    return next((s.on for _, s in _with_role(spec, "update")), None)


# ---- reward_model: ----------------------------------------------------------------------------


def check_reward_model(spec: Pipeline, scorers: list, report: Reporter, *, complete: bool = True) -> None:
    rm = spec.reward_model
    if rm.enable is False and scorers:
        names = ", ".join(s.name for _, s in scorers)
        which = f"stages {names} score" if len(scorers) > 1 else f"stage {names} scores"
        report(
            ("reward_model", "enable"),
            f"reward_model.enable is false, but {which} with the reward model",
            "remove enable: false, or remove the stage",
        )
    elif rm.enable and not scorers and complete:
        on = _actor_pool(spec) or "a pool of its own"
        report(
            ("reward_model", "enable"),
            "reward_model.enable is true, but no stage scores with the reward model",
            f"add {{name: rm_score, uses: rm_score, on: {on}}} (a sequence classifier) or "
            f"{{name: judge, uses: judge_score, on: {on}}} (a generative judge), or remove enable: true",
        )
    if scorers and rm.model_path is None and rm.enable is not False:
        i, stage = scorers[0]
        report(
            ("stages", i, "uses"),
            f"stage {stage.name} ({stage.uses}) scores with the reward model, but reward_model.model_path is not set",
            "add reward_model: {model_path: <a local Hugging Face directory or builtin:tiny-rank-rm>}",
        )
    for i, stage in scorers[1:]:
        first = scorers[0][1]
        report(
            ("stages", i, "uses"),
            f"stages {first.name} and {stage.name} both score with the reward model: a step holds one model reward "
            "stage (one producer of rm_scores)",
            f"remove {stage.name}, or score with {first.name} alone",
        )
    if scorers:
        _check_placement(spec, scorers[0], report)
    if scorers and spec.data.val is not None and not _with_role(spec, "reward"):
        report.warn(
            ("data", "val"),
            f"validation scores with the rule reward stages only, and this step has none: {scorers[0][1].name}'s "
            "model scores train, but validation reports no reward",
            "add a rule reward stage (its score is combined per reward_model.combine), or remove data.val",
        )


def _check_placement(spec: Pipeline, scorer: tuple[int, StageSpec], report: Reporter) -> None:
    """``enable_resource_pool`` (verl's switch) and the stage's ``on:`` say the same."""
    i, stage = scorer
    actor, own = _actor_pool(spec), spec.reward_model.enable_resource_pool
    if actor is None or own is None:
        return
    if own and stage.on == actor:
        report(
            ("stages", i, "on"),
            f"reward_model.enable_resource_pool is true, but stage {stage.name} runs on {actor!r}, the actor's pool",
            f"bind {stage.name} to a local pool of its own, or set reward_model.enable_resource_pool: false",
        )
    elif not own and stage.on != actor:
        report(
            ("stages", i, "on"),
            f"reward_model.enable_resource_pool is false (the model beside the actor), but stage {stage.name} runs "
            f"on {stage.on!r}, not on the actor's pool {actor!r}",
            f"bind {stage.name} to {actor!r}, or set reward_model.enable_resource_pool: true",
        )


def dataflow_reported(spec: Pipeline) -> tuple[str, ...]:
    """Data-flow messages these rules say better, with their fix: two model reward stages (two producers of
    ``rm_scores``, and of the step's scores when no rule stage combines them); distillation without its stage
    (the update reads the teachers' log-probs). ``check_dataflow`` leaves them out."""
    out: list[str] = []
    if len(_with_role(spec, MODEL_REWARD)) > 1:
        fields = ("rm_scores",) if _with_role(spec, "reward") else ("rm_scores", "token_level_scores", "scores")
        out += [f"field '{name}' has two producers" for name in fields]
    if spec.distillation.enabled and not _with_role(spec, TEACHER):
        out += [f"reads '{name}' but no stage produces it" for name in ("teacher_logprobs", "teacher_ids")]
    return tuple(out)


# ---- distillation: ----------------------------------------------------------------------------


def check_distillation(spec: Pipeline, teachers: list, report: Reporter, *, complete: bool = True) -> None:
    d = spec.distillation
    if d.enabled and not teachers and complete:
        on = _actor_pool(spec) or "a pool of its own"
        report(
            ("distillation", "enabled"),
            "distillation.enabled is true, but no stage computes the teachers' log-probs",
            f"add {{name: teacher_log_prob, uses: teacher_log_prob, on: {on}}}",
        )
    if not d.enabled:
        for i, stage in teachers:
            report(
                ("stages", i, "uses"),
                f"stage {stage.name} computes teachers' log-probs, but distillation.enabled is not true",
                "set distillation: {enabled: true, teacher_models: {...}}, or remove the stage",
            )
    if d.teacher_key != ROUTING_KEY:
        report(
            ("distillation", "teacher_key"),
            f"teacher_key {d.teacher_key!r}: rlflow routes rows to teachers by {ROUTING_KEY}, the field its data "
            "loader fills",
            f"set teacher_key: {ROUTING_KEY} (or remove it) and key each teacher by the rows' {ROUTING_KEY}",
        )
    for i, stage in teachers[1:]:
        report(
            ("stages", i, "uses"),
            f"stages {teachers[0][1].name} and {stage.name} both compute the teachers' log-probs",
            f"remove {stage.name}: one stage routes every row to its teacher",
        )


def check_teacher_vocabularies(spec: Pipeline, report: Reporter, resolve: Resolve) -> None:
    """verl distils token by token, so a teacher reads the student's token ids: its tokenizer must be the
    student's. Compared by the folders' tokenizer.json (no torch); a folder without one is not compared."""
    student_path = spec.model.tokenizer or spec.model.path
    student = _vocabulary(student_path, resolve)
    if student is None:
        return
    for name, teacher in spec.distillation.teacher_models.items():
        theirs = _vocabulary(teacher.model_path, resolve)
        if theirs is None or theirs == student:
            continue
        differ = len(set(theirs.items()) ^ set(student.items()))
        report(
            ("distillation", "teacher_models", name, "model_path"),
            f"teacher {name}'s tokenizer ({len(theirs)} tokens) is not the student's ({student_path}, "
            f"{len(student)} tokens; {differ} token ids differ): distillation compares log-probs token by token, "
            "so teacher and student need one vocabulary",
            "pick a teacher of the student's family (the same tokenizer.json)",
        )


def tokenizer_file(path: str, resolve: Resolve) -> Path | None:
    """The tokenizer.json of a model path: a built-in model's tokenizer, else the folder's own; None if unknown."""
    from rlflow.data.tokenizer import BUILTIN_TOKENIZERS

    name = path.removeprefix(BUILTIN_PREFIX) if path.startswith(BUILTIN_PREFIX) else None
    try:
        if name in BUILTIN_TOKENIZERS:
            return BUILTIN_TOKENIZERS[name] / "tokenizer.json"
        folder = builtin_path(path) if name is not None else resolve(path)
    except ValueError:  # an unknown builtin: name (the path rule says so)
        return None
    return folder / "tokenizer.json" if folder is not None else None


def _vocabulary(path: str, resolve: Resolve) -> dict[str, int] | None:
    """Token -> id of a model's tokenizer.json (its model's vocabulary and added tokens); None when unreadable."""
    file = tokenizer_file(path, resolve)
    if file is None:
        return None
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
        vocab = data["model"]["vocab"]
        tokens = dict(vocab) if isinstance(vocab, dict) else {str(v[0]): i for i, v in enumerate(vocab)}
        tokens.update({t["content"]: int(t["id"]) for t in data.get("added_tokens", ())})
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return tokens


# ---- trainer_mode separate_async -----------------------------------------------------------------


def check_separate_async(spec: Pipeline, models: list, report: Reporter) -> None:
    """separate_async: a reward model or teacher runs in the trainer's lane, after the batch is sampled; on the
    rollout's resource it would queue behind the sampling of the next batches."""
    if spec.trainer.trainer_mode != "separate_async":
        return
    actor = _actor_pool(spec)
    rollouts = {s.on: s.name for _, s in _with_role(spec, "rollout") if s.on != actor}  # else: the rollout's rule
    for i, stage in models:
        if stage.on in rollouts:
            report(
                ("stages", i, "on"),
                f"trainer_mode separate_async runs {stage.name} in the trainer's lane, but it shares {stage.on!r} "
                f"with {rollouts[stage.on]}, which samples the next batches there meanwhile: {OVERLAP_NEEDS}, so it "
                "would wait behind that sampling",
                f"bind {stage.name} to the actor's pool ({actor}) or a pool of its own",
            )
