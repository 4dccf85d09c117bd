"""Every node of a joined cluster must see the driver's files: checked per node before any pool starts.

The paths workers open are read from the pipeline (the project root, the model, the databases, reward
and tool files; not the prompts, which the driver loads). On a real two-node cluster
(ray.cluster_utils.Cluster), a driver whose project, data and run directory live on a filesystem only
it sees (a tmpfs in its own mount namespace, as a second host's disk would be) is refused in one line
naming each node and each path it lacks, before a worker starts.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from runtime_helpers import REPO, python_path, small_sets

from rlflow.assets import BIRD_SAMPLE
from rlflow.check import load_pipeline
from rlflow.runtime.node_paths import PROBE_DIR, look_around, needed_paths


def test_the_paths_workers_open_are_read_from_the_pipeline(tmp_path):
    (tmp_path / "rewards.py").write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n")
    spec = load_pipeline(
        REPO / "pipelines" / "bird_grpo.yaml", [f"bird_root={BIRD_SAMPLE}", "model_path=builtin:tiny-sql-warm"]
    ).spec
    pipeline = spec.model_dump(by_alias=True, mode="json")
    pipeline["stages"][1]["with"] = {"functions": [{"function": "rewards.py:score"}], "note": "not/a/path"}
    assert needed_paths(pipeline, tmp_path) == [
        ("the project root", str(tmp_path), "folder"),
        ("data.databases", str(BIRD_SAMPLE / "databases"), "folder"),
        ("stages[1].with.functions[0].function", str(tmp_path / "rewards.py"), "file"),
    ], "the prompts (data.train, data.val) are the driver's; builtin: models are each node's own"


def test_a_node_reports_each_path_it_lacks_a_foreign_run_directory_and_a_missing_plugin(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / PROBE_DIR).mkdir(parents=True)
    (run_dir / PROBE_DIR / "driver").write_text("another run's token")  # same path, another disk's folder
    (tmp_path / "here.py").write_text("")
    paths = [("the project root", str(tmp_path), "folder"), ("model.path", str(tmp_path / "model"), "folder")]
    lacks = look_around(paths, str(run_dir), "the driver's token", ["here", "nowhere.module"], str(tmp_path))
    assert lacks == [
        f"no folder {tmp_path / 'model'} (model.path)",
        f"another folder at {run_dir}, not the driver's run directory",
        "no plugin module 'nowhere.module'",
    ]


@pytest.fixture
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    yield cluster
    cluster.shutdown()


def test_nodes_that_do_not_see_the_drivers_files_are_refused_in_one_line(two_nodes, tmp_path):
    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs a mount namespace of its own (unshare -m, as root)")
    private = tmp_path / "private"  # empty for the nodes; the driver's own tmpfs in its namespace
    private.mkdir()
    project = private / "project"
    run_dir = private / "run"
    rlflow_yaml = f"vars: {{model_path: 'builtin:tiny-qwen2', bird_root: '{private}/data'}}\\nray: {{address: '{two_nodes.address}'}}\\n"
    command = [sys.executable, "-m", "rlflow.cli.main", "run", str(REPO / "pipelines" / "bird_grpo.yaml")]
    command += ["--run-dir", str(run_dir), *small_sets("trainer.total_steps=1")]
    script = (
        f"mount -t tmpfs tmpfs {private} && mkdir {project} && cp -r {BIRD_SAMPLE} {private}/data && "
        f"printf {shlex.quote(rlflow_yaml)} > {project}/rlflow.yaml && cd {project} && exec {shlex.join(command)}"
    )
    started = time.time()
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": python_path(),
            "RAY_USAGE_STATS_ENABLED": "0",
            "HOME": str(tmp_path),
            **cluster_token(),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert time.time() - started < 120
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    nodes = {node.node_id[:8] for node in two_nodes.list_all_nodes()}
    line = lines[0]
    assert line.startswith("error: the cluster's nodes do not all see this run's files: node "), line
    for node in nodes:
        assert f"node {node} at " in line, (node, line)
    for lacks in (
        f"no folder {project} (the project root)",
        f"no folder {private}/data/databases (data.databases)",
        f"no folder {run_dir} (the run directory)",
    ):
        assert line.count(lacks) == 1, (lacks, line)  # the nodes that lack the same are named together
    assert "docs/cluster.md" in line
    assert "start actor_pool" not in done.stdout, "refused before any worker starts"
    assert not any(Path(private).iterdir()), "the driver's files never reached the nodes' view"


def cluster_token() -> dict[str, str]:
    """What the driver needs to join the test's cluster: a Ray started in this process earlier in the suite
    (``ray.init``) sets ``RAY_AUTH_MODE=token`` here, and the clusters started after it then want the token
    kept under this process's home, which the driver, given a home of its own, would not find."""
    env = {k: os.environ[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH") if k in os.environ}
    token = Path.home() / ".ray" / "auth_token"
    if env.get("RAY_AUTH_MODE") == "token" and "RAY_AUTH_TOKEN" not in env and token.is_file():
        env.setdefault("RAY_AUTH_TOKEN_PATH", str(token))
    return env
