"""Before a run on a joined cluster starts its pools: does every node see the driver's files?

One task per node looks; what any node lacks is one line. Design notes: docs/design/node_paths.md.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import sys
from pathlib import Path

from rlflow.assets import BUILTIN_PREFIX
from rlflow.errors import NodesLackPaths

PROBE_DIR = ".node-check"
DRIVER_FILE = "driver"
PROBE_TIMEOUT_S = 60.0
MAX_PATHS = 100
_REFERENCE = re.compile(r"^(?P<file>.+\.py):[A-Za-z_][\w.]*$")  # a reward function's `path.py:callable`
LOADED_ON_DRIVER = {("data", "train"), ("data", "val")}  # the prompts: workers never open these


def needed_paths(pipeline: dict, root: Path) -> list[tuple[str, str, str]]:
    """(what, absolute path, "file" or "folder") for the project root and every path in ``pipeline``'s model,
    data and stages that exists here: what a worker may open. Relative paths are the project root's, as the
    workers take them; ``builtin:`` names are each node's own installed assets."""
    found = {str(root): ("the project root", str(root), "folder")}
    for where, text in _strings(pipeline):
        match = _REFERENCE.match(text)
        candidate = match["file"] if match else text
        if candidate.startswith(BUILTIN_PREFIX) or "\n" in candidate or not 1 < len(candidate) < 4096:
            continue
        path = Path(os.path.expanduser(candidate))
        path = path if path.is_absolute() else root / path
        if len(found) < MAX_PATHS and str(path) not in found and path.exists():
            found[str(path)] = (where, str(path), "folder" if path.is_dir() else "file")
    return list(found.values())


def _strings(pipeline: dict):
    """(dotted place, value) of every string under the pipeline's ``model``, ``data`` and each stage's ``with``."""
    tops = [("model", pipeline.get("model")), ("data", pipeline.get("data"))]
    tops += [(f"stages[{i}].with", stage.get("with")) for i, stage in enumerate(pipeline.get("stages") or [])]
    todo = [(place, value) for place, value in tops if value is not None]
    while todo:
        place, value = todo.pop(0)
        if isinstance(value, str):
            yield place, value
        elif isinstance(value, dict):
            todo += [
                (f"{place}.{k}", v)
                for k, v in value.items()
                if tuple(f"{place}.{k}".split(".")) not in LOADED_ON_DRIVER
            ]
        elif isinstance(value, list):
            todo += [(f"{place}[{i}]", v) for i, v in enumerate(value)]


def check_node_paths(pipeline: dict, root: Path, run_dir: Path, plugins: tuple[str, ...]) -> str:
    """Ask every alive node what it lacks of ``needed_paths``, the run directory and the plugins; a
    ``NodesLackPaths`` line naming each node and path when any lacks something, else what was checked."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    paths = needed_paths(pipeline, root)
    probe = run_dir / PROBE_DIR
    token = secrets.token_hex(16)
    probe.mkdir(exist_ok=True)
    (probe / DRIVER_FILE).write_text(token)
    try:
        nodes = {
            n["NodeID"]: f"node {n['NodeID'][:8]} at {n.get('NodeManagerAddress', '?')}"
            for n in ray.nodes()
            if n.get("Alive")
        }
        look = ray.remote(num_cpus=0, max_retries=0)(look_around)
        refs = {
            node: look.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(
                paths, str(run_dir), token, list(plugins), str(root)
            )
            for node in nodes
        }
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
        lacking: dict[tuple[str, ...], list[str]] = {}  # nodes that lack the same are named together
        for node, ref in refs.items():
            lacks = _answer(ray, ref, ref in ready, probe / node, token)
            if lacks:
                lacking.setdefault(tuple(lacks), []).append(nodes[node])
        problems = [f"{' and '.join(names)}: {', '.join(lacks)}" for lacks, names in lacking.items()]
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    if problems:
        raise NodesLackPaths(
            "the cluster's nodes do not all see this run's files: " + "; ".join(problems) + " (every node needs the "
            "project, model and data at the driver's paths, and the run directory on a filesystem they all share: "
            "docs/cluster.md; or remove ray.address to run on this machine)"
        )
    return f"{len(nodes)} node{'s' * (len(nodes) != 1)} see the {len(paths)} paths workers read and the run directory"


def _answer(ray, ref, ready: bool, reply: Path, token: str) -> list[str]:
    """What one node lacks, from its answer, and whether what it wrote into the run directory reached here."""
    if not ready:
        ray.cancel(ref, force=True)
        return [f"no answer within {PROBE_TIMEOUT_S:g} s (is the node overloaded or cut off?)"]
    try:
        lacks = ray.get(ref)
    except Exception as exc:  # the task could not run there: rlflow missing on that node, most often
        first = (str(getattr(exc, "cause", None) or exc).strip().splitlines() or [type(exc).__name__])[-1]
        return [f"cannot run rlflow's check there ({first[:200]}; install the same rlflow on every node)"]
    if not lacks and not (reply.is_file() and reply.read_text() == token):
        lacks = ["what it writes in the run directory does not reach the driver (not one shared folder)"]
    return lacks


def look_around(paths: list[tuple[str, str, str]], run_dir: str, token: str, plugins: list[str], root: str) -> list:
    """On one node: each of ``paths`` it lacks, whether ``run_dir`` is the driver's own folder (it holds the
    driver's token) and writable, and each plugin module it cannot find."""
    import ray

    lacks = [f"no {kind} {path} ({what})" for what, path, kind in paths if not _is(kind, path)]
    probe = Path(run_dir) / PROBE_DIR
    try:
        seen = (probe / DRIVER_FILE).read_text()
    except OSError:
        seen = None
    if seen != token:
        lacks.append(
            f"another folder at {run_dir}, not the driver's run directory"
            if os.path.isdir(run_dir)
            else f"no folder {run_dir} (the run directory)"
        )
    else:
        try:
            (probe / ray.get_runtime_context().get_node_id()).write_text(token)
        except OSError as exc:
            lacks.append(f"cannot write in the run directory {run_dir} ({exc.strerror or exc})")
    sys.path.insert(0, root)  # as the workers import plugins: the project root first
    try:
        lacks += [f"no plugin module {name!r}" for name in plugins if not _importable(name)]
    finally:
        sys.path.remove(root)
    return lacks


def _is(kind: str, path: str) -> bool:
    return os.path.isdir(path) if kind == "folder" else os.path.isfile(path)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package that is missing or fails to import
        return False
