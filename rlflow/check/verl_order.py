"""Does a compiled plan run as the installed verl's ``PPOTrainerSync`` does? One line per difference.

``compare_with_verl(spec, plan)`` compares verl's start-up and step (``rlflow.check.verl_source``) with the plan:
order, conditions, presence, the step timer, cadence. Pure: it imports neither verl nor torch.
Design notes: docs/design/verl_order.md.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import SimpleNamespace

from rlflow.check.verl_cadence import Unreadable, mentions_cadence, steps_where
from rlflow.check.verl_source import (
    SEPARATE_ASYNC_TRAINER,
    SOURCE_ENV,
    STEP_TIMER,
    SYNC_TRAINER,
    Site,
    VerlSourceError,
    read_trainer,
    verl_root,
)
from rlflow.check.verl_update_cycles import LOOP, compare_update_cycles
from rlflow.plan.model import RESUME, Plan, PlanStage
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages.base import Cadence, due
from rlflow.stages.registry import STAGE_KINDS

Holds = Callable[[Pipeline, Plan], bool]
NOT_INSTALLED = "verl order: verl is not installed, check skipped (pip install 'rlflow[train]' to run it)"


def _always(spec: Pipeline, plan: Plan) -> bool:
    return True


def _never(spec: Pipeline, plan: Plan) -> bool:
    return False


def _balance_knob(spec: Pipeline, plan: Plan) -> bool:
    # trainer.balance_batch arrives with the balance_batch stage kind; until then verl's default (on) holds.
    return getattr(spec.trainer, "balance_batch", True)


def _balances(spec: Pipeline, plan: Plan) -> bool:
    """rlflow balances only where it changes something: the knob on and more than one actor worker."""
    update = plan.first_with_role("update")
    placement = plan.resources.get(update.resource) if update is not None else None
    workers = placement.workers if placement is not None and placement.type == "local" else 1
    return _balance_knob(spec, plan) and workers > 1


def _has_val_data(spec: Pipeline, plan: Plan) -> bool:
    return spec.data.val is not None


def _recomputes_old_log_probs(spec: Pipeline, plan: Plan) -> bool:
    """verl still times ``old_log_prob`` in bypass mode, but only copies the rollout's log-probs there."""
    return not spec.algorithm.rollout_correction.bypass_mode


def _scores_with_a_model(spec: Pipeline, plan: Plan) -> bool:
    """verl's ``use_rm`` (reward.reward_model.enable): the block's switch, else a stage that uses the model."""
    enable = spec.reward_model.enable
    return enable if enable is not None else any(e.role == "reward_model" for e in plan.step)


def _distils(spec: Pipeline, plan: Plan) -> bool:
    return spec.distillation.enabled


def canonical(condition: str) -> str:
    """A condition as ``ast.unparse`` writes it, so the table matches verl's text whatever its layout."""
    return ast.unparse(ast.parse(condition, mode="eval").body)


@dataclass(frozen=True)
class Known:
    """A verl condition rlflow knows: what it means for a pipeline, and whether it holds for one."""

    meaning: str
    holds: Holds


KNOWN_CONDITIONS: dict[str, Known] = {
    canonical(text): known
    for text, known in {
        "self.use_reference_policy": Known(
            "algorithm.use_kl_loss or algorithm.use_kl_in_reward", lambda spec, plan: spec.algorithm.uses_reference
        ),
        "self.use_critic": Known(
            "a critic (algorithm.adv_estimator gae, or critic.enable)", lambda spec, plan: spec.uses_critic
        ),
        "self.reward_loop_manager.reward_loop_worker_handles is None": Known(
            "a reward scored apart from generation, as rlflow's reward stage always is", _always
        ),
        "self.config.trainer.critic_warmup <= self.global_steps": Known(
            "past trainer.critic_warmup, which update_actor checks itself every step", _always
        ),
        "self.config.trainer.balance_batch": Known("trainer.balance_batch", _balance_knob),
        "self.config.trainer.get('val_before_train', True)": Known(
            "trainer.val_before_train", lambda spec, plan: spec.trainer.val_before_train
        ),
        "rollout_data_dir": Known("trainer.rollout_data_dir, which rlflow does not have", _never),
    }.items()
}
# Loops verl runs a stage in that still run it once per rlflow step: the sync trainer's parameter_sync_step
# is 1; the separate-async trainer's cycles are compared as a whole (verl_update_cycles), not stage by stage.
KNOWN_LOOPS = {canonical(LOOP): "the update cycles of a step"}


@dataclass(frozen=True)
class VerlStage:
    """One thing verl's step (or start-up) does, and the rlflow stage kind that stands for it."""

    timer: str | None  # verl's timer (timing_s/<timer>); None: found by its call
    call: str  # the trainer call doing the work (verl_source does not walk into it)
    kind: str | None  # the rlflow stage kind standing for it; None: rlflow runs no stage for it
    role: str | None = None  # plan entries of this role stand for it as well (plugin kinds)
    conditions: tuple[str, ...] = ()  # verl's conditions on it (cadence aside) that rlflow mirrors
    applies: Holds = _always  # rlflow's own narrowing of when the stage is in the plan
    note: str = ""
    # The part of another row's timed work it is (verl times both under one timer): rlflow's stage may keep a
    # timer of its own, and its order is the part's place in that work.
    part: str = ""
    unordered_with: tuple[str, ...] = ()  # kinds whose order against it verl does not fix

    @property
    def verl_name(self) -> str:
        name = f"`{self.timer}`" if self.timer else f"`{self.call}()`"
        return f"{name}'s {self.part}" if self.part else name


STEP_STAGES = (
    VerlStage("gen", "replay_buffer.sample", "generate", "rollout"),
    # verl's agent loop asks the teachers right after each generation (AgentLoopWorker._compute_teacher_logprobs);
    # against the reward model it is unordered: a reward model on a pool of its own scores in that loop too.
    VerlStage(
        "gen",
        "replay_buffer.sample",
        "teacher_log_prob",
        "teacher",
        applies=_distils,
        part="teacher log-probs (its agent loop's, right after each generation)",
        unordered_with=("rm_score", "judge_score"),
    ),
    # verl's reward step scores with the reward model first (compute_rm_score), then the rule reward reads them.
    VerlStage(
        "reward",
        "_compute_reward_colocate",
        "rm_score",
        "reward_model",
        ("self.reward_loop_manager.reward_loop_worker_handles is None",),
        applies=_scores_with_a_model,
        part="reward-model scores (compute_rm_score, its first part)",
        unordered_with=("teacher_log_prob",),
    ),
    VerlStage(
        "reward",
        "_compute_reward_colocate",
        "reward_function",
        "reward",
        ("self.reward_loop_manager.reward_loop_worker_handles is None",),
    ),
    VerlStage(None, "_balance_batch", "balance_batch", applies=_balances),
    VerlStage("old_log_prob", "_compute_old_log_prob", "old_log_prob", "log_prob", applies=_recomputes_old_log_probs),
    VerlStage("ref", "_compute_ref_log_prob", "ref_log_prob", "reference", ("self.use_reference_policy",)),
    VerlStage("values", "_compute_values", "compute_values", "values", ("self.use_critic",)),
    VerlStage("adv", "_compute_advantage", "grpo_advantage", "advantage"),
    VerlStage("update_critic", "_update_critic", "update_critic", "critic_update", ("self.use_critic",)),
    VerlStage(
        "update_actor",
        "_update_actor",
        "update_actor",
        "update",
        ("self.config.trainer.critic_warmup <= self.global_steps",),
    ),
    VerlStage("save_checkpoint", "_save_checkpoint", "save_checkpoint", "checkpoint"),
    VerlStage("update_weights", "checkpoint_manager.update_weights", "sync_weights", "weight_sync"),
    VerlStage("testing", "_validate", "validate", "validation", applies=_has_val_data),
    VerlStage(
        "dump_rollout_generations",
        "_log_rollout_data",
        None,
        conditions=("rollout_data_dir",),
        note="rlflow writes no rollout dumps",
    ),
)
STARTUP_STAGES = (
    VerlStage(None, "_load_checkpoint", RESUME, "resume"),
    VerlStage(None, "checkpoint_manager.update_weights", "sync_weights", "weight_sync"),
    VerlStage(
        None,
        "_validate",
        "validate",
        "validation",
        ("self.config.trainer.get('val_before_train', True)",),
        applies=_has_val_data,
    ),
)
# separate_async: the trainer pushes its weights to the standalone rollout (its own resources) ...
STANDALONE_SYNC = "standalone_checkpoint_manager.update_weights"
ASYNC_STARTUP_STAGES = tuple(
    replace(row, call=STANDALONE_SYNC) if row.role == "weight_sync" else row for row in STARTUP_STAGES
)
# ... and may lend the trainer's GPUs to the rollout between steps (verl's hybrid rollout,
# hybrid_rollout_config.enable_switch), timed by these; rlflow keeps each resource to its own stages.
HYBRID_SWITCH_TIMERS = frozenset({"switch_to_trainer", "switch_wait", "switch_to_rollout"})
LEAVES = frozenset(row.call for row in (*STEP_STAGES, *STARTUP_STAGES, *ASYNC_STARTUP_STAGES) if row.kind is not None)
# Settings the cadences are compared under: (save_freq, test_freq) over CADENCE_STEPS steps.
CADENCE_SETTINGS = ((3, 2), (2, 3), (1, 1), (-1, -1))
CADENCE_STEPS = 7


@dataclass(frozen=True)
class VerlOrderReport:
    """What the check read (``source``) and found: one line per difference, or why it did not run."""

    source: str
    differences: tuple[str, ...] = ()
    skipped: str | None = None
    trainer: str = SYNC_TRAINER[1]  # the verl trainer compared with
    cycles: str = ""  # separate_async: the parameter_sync_step the plan's update runs as

    def warnings(self) -> list[str]:
        """The lines a user sees as warnings (none when the plan runs as verl does)."""
        if self.skipped:
            return [self.skipped]
        return [f"verl order: {d}" for d in self.differences]

    def summary(self) -> str:
        if self.skipped:
            return self.skipped
        cycles = f"; {self.cycles}" if self.cycles else ""
        lane = "" if self.trainer == SYNC_TRAINER[1] else f" (trainer lane{cycles}; the rollout runs ahead, as in verl)"
        if self.differences:
            return f"verl order: {len(self.differences)} difference(s) from {self.trainer} in {self.source}{lane}"
        return f"verl order: the plan runs as {self.trainer} in {self.source} does{lane}"


def compare_with_verl(spec: Pipeline, plan: Plan, root: Path | None = None) -> VerlOrderReport:
    """Compare ``plan`` (compiled from ``spec``) with verl's trainer of the plan's mode, read from ``root``
    (default: ``$RLFLOW_VERL_SOURCE``, else the installed verl): ``PPOTrainerSync`` for ``sync``; for
    ``separate_async`` the trainer side of ``PPOTrainerSeparateAsync`` (its step order and start-up; the
    rollout running ahead is the mode itself, and its hybrid GPU switching is left out)."""
    trainer, startup_rows = (SEPARATE_ASYNC_TRAINER, ASYNC_STARTUP_STAGES) if plan.is_async else (
        SYNC_TRAINER, STARTUP_STAGES)  # fmt: skip
    source = f"the verl source in {root}" if root is not None else None
    root = root or verl_root()
    if root is None:
        return VerlOrderReport("verl", skipped=NOT_INSTALLED, trainer=trainer[1])
    source = source or _installed_source()
    try:
        sites = read_trainer(root, LEAVES, trainer)
    except VerlSourceError as exc:
        return VerlOrderReport(source, (f"cannot read verl's {trainer[1]}: {exc}",), trainer=trainer[1])
    step = [s for s in sites.step if not HYBRID_SWITCH_TIMERS & {s.name, *s.timers}]
    cycles = compare_update_cycles(spec, step, root) if plan.is_async else None
    differences = [
        *_phase_differences(STEP_STAGES, step, plan.step, spec, plan, step=True),
        *(cycles.differences if cycles else ()),
        *_unknown_timers(step),
        *_timer_names(plan, step),
        *_phase_differences(startup_rows, sites.startup, plan.init, spec, plan, step=False),
    ]
    return VerlOrderReport(source, tuple(differences), trainer=trainer[1], cycles=cycles.describe() if cycles else "")


def _installed_source() -> str:
    if os.environ.get(SOURCE_ENV):
        return f"the verl source in {os.environ[SOURCE_ENV]} (${SOURCE_ENV})"
    try:
        return f"verl {version('verl')}"
    except PackageNotFoundError:
        return "verl"


# ---- one phase: the step or start-up -------------------------------------------------------


def _phase_differences(
    rows: Sequence[VerlStage],
    sites: Sequence[Site],
    entries: Sequence[PlanStage],
    spec: Pipeline,
    plan: Plan,
    *,
    step: bool,
) -> list[str]:
    phase = "step" if step else "start-up"
    found = {row: _sites_of(row, sites, step) for row in rows}
    out: list[str] = []
    for row in rows:
        matched = [e for e in entries if _stands_for(e, row)]
        if not found[row]:
            if row.kind is not None:
                out.append(
                    f"verl's {phase} has no {row.verl_name} any more; rlflow's {_names(row, matched)} stands for it"
                )
            continue
        site = found[row][0]
        who = f"verl {row.verl_name} ({site.where}) " + (
            f"vs rlflow {_names(row, matched)}" if row.kind else "(rlflow runs no stage for it)"
        )
        if len(found[row]) > 1:
            wheres = ", ".join(s.where for s in found[row])
            out.append(f"{who}: verl runs it {len(found[row])} times in a {phase} ({wheres}), rlflow once")
        out += [f"{who}: {what}" for what in _conditions(row, site, step)]
        if row.kind is not None and step:
            out += [f"{who}: {what}" for what in _timing(row, site, matched, entries)]
        out += [f"{who}: {what}" for what in _presence(row, site, matched, spec, plan, step)]
    return out + _order(rows, found, sites, entries)


def _sites_of(row: VerlStage, sites: Sequence[Site], step: bool) -> list[Site]:
    if row.timer is not None:
        return [s for s in sites if s.kind == "timer" and s.name == row.timer]
    timed = {r.timer for r in STEP_STAGES if r.timer} if step else set()
    return [s for s in sites if s.kind == "call" and s.name == row.call and not timed & set(s.timers)]


def _stands_for(entry: PlanStage, row: VerlStage) -> bool:
    return row.kind is not None and (entry.kind == row.kind or (row.role is not None and entry.role == row.role))


def _names(row: VerlStage, matched: Sequence[PlanStage]) -> str:
    if matched:
        return ", ".join(f"'{e.name}' ({e.kind})" for e in matched)
    return f"{row.kind} (not in the plan)"


def _conditions(row: VerlStage, site: Site, step: bool) -> list[str]:
    """Conditions verl dropped, added or changed around the stage, and loops that repeat it."""
    actual = [c for c in site.conditions if not _is_cadence(c)]
    expected = [canonical(c) for c in row.conditions]
    out = []
    for c in expected:
        if c not in actual:
            mirrored = f"rlflow's condition for it: {KNOWN_CONDITIONS[c].meaning}" if row.kind else row.note
            out.append(f"verl no longer runs it under `if {c}` ({mirrored})")
    if row.kind is None:  # a further condition on what rlflow never runs changes nothing
        return out
    for c in actual:
        if c not in expected:
            known = KNOWN_CONDITIONS.get(c)
            meaning = (
                f" ({known.meaning}); rlflow runs it regardless" if known else ", a condition rlflow does not model"
            )
            out.append(f"verl now runs it only if `{c}`{meaning}")
    if step:
        out += [
            f"verl repeats it in a loop over `{loop}`; rlflow runs it once a step"
            for loop in site.loops
            if loop not in KNOWN_LOOPS
        ]
    return out


def _timing(row: VerlStage, site: Site, matched: Sequence[PlanStage], entries: Sequence[PlanStage]) -> list[str]:
    """Inside/outside the step timer, and the cadence: verl's against rlflow's."""
    out = []
    ours = _rlflow_in_step(row, matched, entries)
    if site.in_step != ours:
        where = {True: "inside", False: "outside"}
        counted = "counts it" if ours else "leaves it out"
        out.append(
            f"verl runs it {where[site.in_step]} the `{STEP_TIMER}` timer, rlflow {where[ours]} "
            f"(rlflow's timing_s/{STEP_TIMER} {counted})"
        )
    cadence = matched[0].cadence if matched else _kind_cadence(row)
    try:
        for save_freq, test_freq in CADENCE_SETTINGS:
            knobs = SimpleNamespace(save_freq=save_freq, test_freq=test_freq)
            theirs = steps_where(_cadence_of(site), knobs, CADENCE_STEPS)
            mine = [s for s in range(1, CADENCE_STEPS + 1) if due(cadence, knobs, s, CADENCE_STEPS)]
            if theirs != mine:
                out.append(
                    f"with save_freq={save_freq}, test_freq={test_freq} over {CADENCE_STEPS} steps verl runs it "
                    f"{_steps(theirs)}, rlflow ({cadence}) {_steps(mine)}"
                )
                break
    except Unreadable as exc:
        out.append(f"verl runs it under `{exc}`, a cadence rlflow cannot read")
    return out


def _rlflow_in_step(row: VerlStage, matched: Sequence[PlanStage], entries: Sequence[PlanStage]) -> bool:
    """rlflow's step clock stops where the first validation stage starts (rlflow.runtime.step_loop)."""
    first_validation = next((i for i, e in enumerate(entries) if e.role == "validation"), len(entries))
    if matched:
        return entries.index(matched[0]) < first_validation
    return row.role != "validation"


def _kind_cadence(row: VerlStage) -> Cadence:
    return STAGE_KINDS.get(row.kind).cadence if row.kind in STAGE_KINDS else "every_step"


def _presence(
    row: VerlStage, site: Site, matched: Sequence[PlanStage], spec: Pipeline, plan: Plan, step: bool
) -> list[str]:
    """Under this pipeline's settings, verl runs the stage exactly when the plan holds it."""
    unknown = [c for c in site.conditions if not _is_cadence(c) and c not in KNOWN_CONDITIONS]
    if unknown:
        return []  # reported as conditions rlflow does not model
    false = [c for c in site.conditions if not _is_cadence(c) and not KNOWN_CONDITIONS[c].holds(spec, plan)]
    try:
        total = spec.trainer.total_steps or 1000  # an epoch-based run: any step count shows whether it ever runs
        hits = steps_where(_cadence_of(site), spec.trainer, total) if step else [1]
    except Unreadable:
        return []  # reported with the cadence
    runs = not false and bool(hits)
    if row.kind is None:
        return [f"under this pipeline's settings verl runs it; rlflow has no stage for it ({row.note})"] if runs else []
    wanted = runs and row.applies(spec, plan)
    if wanted and not matched:
        return [f"under this pipeline's settings verl runs it, but the plan has no {row.kind} stage"]
    if matched and not runs:
        why = f"`{false[0]}` is false ({KNOWN_CONDITIONS[false[0]].meaning})" if false else "its cadence never hits"
        return [f"the plan runs it, but under this pipeline's settings verl does not: {why}"]
    if matched and not wanted:
        return ["the plan runs it, but rlflow leaves it out under this pipeline's settings"]
    return []


def _order(
    rows: Sequence[VerlStage], found: dict[VerlStage, list[Site]], sites: Sequence[Site], entries: Sequence[PlanStage]
) -> list[str]:
    """Every two stages the plan holds run in verl's order (the walk's order: file order is not run order)."""
    index = {id(site): i for i, site in enumerate(sites)}
    placed = []
    for row in rows:
        positions = [i for i, e in enumerate(entries) if _stands_for(e, row)]
        if found[row] and positions:
            placed.append((found[row][0], row, positions))
    placed.sort(key=lambda p: index[id(p[0])])
    out = []
    for i, (site_a, row_a, pos_a) in enumerate(placed):
        for site_b, row_b, pos_b in placed[i + 1 :]:
            if row_b.kind in row_a.unordered_with or row_a.kind in row_b.unordered_with:
                continue
            if max(pos_a) > min(pos_b) and site_a is site_b:
                out.append(
                    f"verl runs {row_a.verl_name} ({site_a.where}) before the rest of that work "
                    f"('{entries[min(pos_b)].name}'); the plan runs '{entries[min(pos_b)].name}' before "
                    f"'{entries[max(pos_a)].name}'"
                )
            elif max(pos_a) > min(pos_b):
                out.append(
                    f"verl runs {row_a.verl_name} ({site_a.where}) before {row_b.verl_name} ({site_b.where}); "
                    f"the plan runs '{entries[min(pos_b)].name}' before '{entries[max(pos_a)].name}'"
                )
    return out


# ---- timers the table does not know --------------------------------------------------------


def _unknown_timers(sites: Sequence[Site]) -> list[str]:
    known = {row.timer for row in STEP_STAGES} | {STEP_TIMER}
    out = []
    for i, site in enumerate(sites):
        if site.kind == "timer" and site.name not in known:
            calls = [s.name for s in sites[i + 1 :] if s.kind == "call" and s.timers[-1:] == (site.name,)]
            doing = f" (calls {', '.join(dict.fromkeys(calls))})" if calls else ""
            inside = "inside" if site.in_step else "outside"
            out.append(
                f"verl `{site.name}` ({site.where}): a timed stage {inside} verl's step{doing} that rlflow has "
                "no stage for"
            )
    return out


def _timer_names(plan: Plan, sites: Sequence[Site]) -> list[str]:
    """Each plan stage that stands for a verl stage is timed under verl's name; no other uses one of verl's."""
    verl_timers = {s.name for s in sites if s.kind == "timer"}
    out = []
    for entry in plan.step:
        row = next((r for r in STEP_STAGES if _stands_for(entry, r)), None)
        stage = f"rlflow '{entry.name}' ({entry.kind})"
        if row is not None and row.part and entry.verl_timer in (None, row.timer):
            continue  # a part of verl's timed work: timed as itself, or within verl's timer
        if row is not None and entry.verl_timer != row.timer:
            theirs = f"times it as `{row.timer}`" if row.timer else "does not time it"
            out.append(f"{stage} is timed as {_timer(entry)}; verl {theirs} ({row.call})")
        elif row is None and entry.verl_timer is not None:
            if entry.verl_timer in verl_timers:
                out.append(f"{stage} is timed as {_timer(entry)}, the timer of verl work its role does not do")
            else:
                out.append(f"{stage} is timed as {_timer(entry)}, a timer verl's step does not have")
    return out


def _timer(entry: PlanStage) -> str:
    return f"timing_s/{entry.verl_timer}" if entry.verl_timer else "nothing"


def _is_cadence(condition: str) -> bool:
    return condition not in KNOWN_CONDITIONS and mentions_cadence(condition)


def _cadence_of(site: Site) -> list[str]:
    return [c for c in site.conditions if _is_cadence(c)]


def _steps(steps: Iterable[int]) -> str:
    steps = list(steps)
    if not steps:
        return "at no step"
    if steps == list(range(1, CADENCE_STEPS + 1)):
        return "every step"
    return "at steps " + ", ".join(map(str, steps))
