"""The compiled plan runs in the order the installed verl runs: read from verl's source, not copied.

verl's V1 trainer cannot be imported here (it needs its transfer-queue service), so the
source files of the installed package are located through its distribution metadata and
parsed with ``ast``. ``TrainerWalk`` follows the synchronous trainer's life as verl's entry
point drives it (``init()`` then ``fit()``): it goes through each method in source order,
records every ``marked_timer("<name>", ...)`` and every ``self.<...>(...)`` call, and steps
into calls of the trainer's own methods, resolved on ``PPOTrainerSync``'s class hierarchy
(so the ``on_step_end`` hook of the sync trainer, which times ``update_weights``, is found).
The step is the body of ``fit``'s training loop; start-up is everything before it.
"""

from __future__ import annotations

import ast
from importlib.metadata import distribution
from pathlib import Path

import pytest

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan
from rlflow.schemas.project import load_project_config

REPO = Path(__file__).resolve().parents[2]
SYNC_TRAINER = ("verl.trainer.ppo.v1.trainer_sync", "PPOTrainerSync")
TIMER_FUNCTIONS = ("marked_timer", "_timer")
# verl's start-up calls that the plan's init entries stand for (the order is read from verl).
INIT_CALLS = {"load_checkpoint": "_load_checkpoint", "sync_weights": "checkpoint_manager.update_weights",
              "validate": "_validate"}  # fmt: skip


def module_file(module: str) -> Path:
    path = Path(distribution("verl").locate_file(module.replace(".", "/") + ".py"))
    if not path.is_file():
        pytest.fail(f"the installed verl has no {module} ({path}); its trainer layout changed")
    return path


def parse(module: str) -> ast.Module:
    return ast.parse(module_file(module).read_text(), filename=str(module_file(module)))


def class_chain(module: str, name: str) -> list[ast.ClassDef]:
    """The class and its bases inside verl, nearest first (depth-first, as single inheritance resolves)."""
    tree = parse(module)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
    imports = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) for a in n.names}
    chain = [node]
    for base in node.bases:
        if isinstance(base, ast.Name):
            source = imports.get(base.id, module if any(
                isinstance(n, ast.ClassDef) and n.name == base.id for n in tree.body) else None)  # fmt: skip
            if source and source.startswith("verl."):
                chain += class_chain(source, base.id)
    return chain


def dotted(node: ast.AST) -> str | None:
    """``self.a.b`` -> ``a.b``; None for anything not rooted at ``self``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and parts:
        return ".".join(reversed(parts))
    return None


class TrainerWalk(ast.NodeVisitor):
    """Timers and self-calls in execution order, stepping into the trainer's own methods."""

    def __init__(self, chain: list[ast.ClassDef]) -> None:
        self.methods: dict[str, ast.FunctionDef] = {}
        for cls in reversed(chain):  # nearer classes override farther ones
            self.methods.update({f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)})
        self.events: list[tuple[str, str]] = []
        self._stack: list[str] = []

    def walk(self, nodes: list[ast.stmt]) -> list[tuple[str, str]]:
        self.events = []
        for node in nodes:
            self.visit(node)
        return self.events

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in TIMER_FUNCTIONS and node.args and isinstance(node.args[0], ast.Constant):
            self.events.append(("timer", node.args[0].value))
        self.generic_visit(node)  # arguments are evaluated before the call runs
        target = dotted(func)
        if target is None:
            return
        self.events.append(("call", target))
        if target in self.methods and target not in self._stack:
            self._stack.append(target)
            for stmt in self.methods[target].body:
                self.visit(stmt)
            self._stack.pop()


def verl_sync_trainer() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(start-up events, events of one training step) of verl's PPOTrainerSync."""
    walker = TrainerWalk(class_chain(*SYNC_TRAINER))
    fit = walker.methods["fit"].body
    loop_at = next(i for i, stmt in enumerate(fit) if isinstance(stmt, ast.While))
    startup = walker.walk(walker.methods["init"].body) + walker.walk(fit[:loop_at])
    return startup, walker.walk([fit[loop_at]])


@pytest.fixture(scope="module")
def verl_order():
    return verl_sync_trainer()


@pytest.fixture(scope="module")
def bird_plan():
    project = load_project_config(REPO)
    return compile_plan(load_pipeline(REPO / "pipelines" / "bird_grpo.yaml", project=project).spec)


def test_step_timers_match_verl_one_to_one_and_in_order(verl_order, bird_plan):
    verl_timers = [name for kind, name in verl_order[1] if kind == "timer"]
    plan_timers = [s.verl_timer for s in bird_plan.step if s.verl_timer]
    assert len(plan_timers) == len(bird_plan.step), "every step stage of the GRPO pipeline maps to a verl timer"
    assert len(set(plan_timers)) == len(plan_timers), f"two stages share a verl timer: {plan_timers}"
    missing = [t for t in plan_timers if t not in verl_timers]
    assert not missing, f"the plan times {missing}, which verl's sync trainer never times (verl has {verl_timers})"
    assert plan_timers == [t for t in verl_timers if t in plan_timers]


def test_verl_times_the_weight_sync_after_the_checkpoint_and_before_validation(verl_order):
    timers = [name for kind, name in verl_order[1] if kind == "timer"]
    assert timers.index("update_actor") < timers.index("save_checkpoint") < timers.index("update_weights")
    assert timers.index("update_weights") < timers.index("testing")


def test_init_phase_follows_verl_start_up_order(verl_order, bird_plan):
    calls = [name for kind, name in verl_order[0] if kind == "call"]
    positions = [calls.index(INIT_CALLS[s.kind]) for s in bird_plan.init]
    assert [s.kind for s in bird_plan.init] == ["load_checkpoint", "sync_weights", "validate"]
    assert positions == sorted(positions), f"verl starts up as {calls}"
    assert [s.cadence for s in bird_plan.init] == ["resume", "init", "init"]


def test_the_walk_sees_the_whole_grpo_step(verl_order):
    """Guards the walker itself: the sync trainer's step reaches the hook and the nested step body."""
    events = verl_order[1]
    assert ("call", "on_step_end") in events and ("call", "_step_once") in events
    timers = [name for kind, name in events if kind == "timer"]
    assert timers[0] == "step" and "gen" in timers and "update_weights" in timers


def test_batch_balancing_sits_where_verl_balances(verl_order):
    """With two actor workers the plan balances between the stages that verl times before and after ``_balance_batch``."""
    events = verl_order[1]
    at = events.index(("call", "_balance_batch"))
    before = {name for kind, name in events[:at] if kind == "timer"}
    after = {name for kind, name in events[at:] if kind == "timer"}
    sets = ["resources.actor_pool.gpus_per_node=2"]
    spec = load_pipeline(REPO / "pipelines" / "bird_grpo.yaml", sets, load_project_config(REPO)).spec
    step = list(compile_plan(spec).step)
    i = next(i for i, s in enumerate(step) if s.kind == "balance_batch")
    assert [s.verl_timer for s in step[:i]] == ["gen", "reward"] and {"gen", "reward"} <= before
    assert {s.verl_timer for s in step[i + 1 :]} <= after
