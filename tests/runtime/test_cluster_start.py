"""Which Ray a run uses: its own local one unless rlflow.yaml names a cluster, and a clear line when that fails.

A ``ray start --head`` runs beside the test (in a private temp dir, so nobody else's Ray
finds it) and ``RAY_ADDRESS`` points at an address where nothing listens: with no address in
rlflow.yaml, rlflow ignores both and trains on its own local Ray.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from runtime_helpers import REPO, read_jsonl, rlflow, small_sets


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens once the socket is closed


@pytest.fixture
def ray_head():
    """A real ``ray start --head`` with one CPU, in its own short temp dir (unix socket paths are short)."""
    temp = Path(tempfile.mkdtemp(prefix="rh", dir="/tmp"))
    ray_cli = Path(sys.executable).with_name("ray")
    env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_USAGE_STATS_ENABLED": "0"}
    port = _closed_port()
    subprocess.run(
        [
            str(ray_cli),
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=1",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=180,
    )
    yield temp, f"127.0.0.1:{port}"
    _kill_processes_under(temp)  # `ray stop` would stop every Ray on the machine, not just this head
    shutil.rmtree(temp, ignore_errors=True)


def _kill_processes_under(temp: Path) -> None:
    """SIGKILL the head's processes: those started with its private temp dir in their environment or command line."""
    import psutil

    mine = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            ours = proc.environ().get("RAY_TMPDIR") == str(temp) or str(temp) in " ".join(proc.info["cmdline"] or ())
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if ours:
            mine.append(proc)
    for proc in mine:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(mine, timeout=30)


def test_no_address_runs_locally_whatever_ray_address_and_a_running_head_say(project_dir, ray_head):
    temp, _ = ray_head
    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    env = {"RAY_ADDRESS": f"127.0.0.1:{_closed_port()}", "RAY_TMPDIR": str(temp)}
    sets = small_sets("trainer.total_steps=1")
    result = rlflow("run", "p.yaml", "--run-dir", "runs/r", *sets, cwd=project_dir, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_jsonl(project_dir / "runs" / "r" / "metrics.jsonl")[-1]["step"] == 1


def test_an_unreachable_cluster_is_one_line_naming_the_address(project_dir):
    address = f"127.0.0.1:{_closed_port()}"
    with (project_dir / "rlflow.yaml").open("a") as fh:
        fh.write(f"ray: {{address: '{address}', connect_timeout_s: 5}}\n")
    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    start = time.monotonic()
    result = rlflow("run", "p.yaml", *small_sets("trainer.total_steps=1"), cwd=project_dir)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert f"cannot reach the Ray cluster at '{address}'" in result.stderr and "ray start --head" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr
    assert time.monotonic() - start < 60
    assert not (project_dir / "runs").exists(), "the failed run left its directory behind"


def test_pools_reserving_more_cpus_than_the_machine_has_are_warned_about(project_dir):
    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    cores = len(os.sched_getaffinity(0))
    sets = small_sets("trainer.total_steps=1", f"resources.reward_pool.cpus_per_worker={cores}")
    result = rlflow("run", "p.yaml", "--run-dir", "runs/r", *sets, cwd=project_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"reward_pool {cores:g}" in result.stderr and f"this machine has {cores} cores" in result.stderr


def test_the_embedded_ray_runs_without_its_idle_daemons():
    """No autoscaler monitor, log monitor or dashboard server (about 160 MiB) on rlflow's own Ray; tasks still run."""
    import psutil
    import ray

    from rlflow.runtime.cluster import Demand, start_ray
    from rlflow.schemas.project import ProjectConfig

    def daemons() -> set[str]:
        found = set()
        for proc in psutil.Process().children(recursive=True):
            try:
                command = " ".join(proc.cmdline())
            except psutil.Error:
                continue
            for marker, name in (
                ("autoscaler/_private/monitor.py", "monitor"),
                ("log_monitor.py", "log_monitor"),
                ("dashboard/dashboard.py", "dashboard"),
                ("dashboard/agent.py", "agent"),
            ):
                if marker in command:
                    found.add(name)
        return found

    assert not ray.is_initialized()
    assert start_ray(ProjectConfig(), [Demand("pool", 1, 1, 0)])
    try:
        assert "agent" in daemons(), "the raylet's own agents stay (the search for daemons finds processes)"
        assert not daemons() & {"monitor", "log_monitor", "dashboard"}, daemons()
        assert ray.get(ray.remote(lambda: 41 + 1).remote(), timeout=60) == 42
    finally:
        ray.shutdown()


@pytest.fixture
def token_head():
    """A real ``ray start --head`` with token authentication and a token of its own."""
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    ray_cli = Path(sys.executable).with_name("ray")
    token = "c" * 32
    env = {**os.environ, "RAY_TMPDIR": str(temp), "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token"}
    env["RAY_AUTH_TOKEN"] = token
    port = _closed_port()
    subprocess.run(
        [str(ray_cli), "start", "--head", f"--port={port}", "--num-cpus=1", "--include-dashboard=false"],
        env=env,
        check=True,
        capture_output=True,
        timeout=180,
    )
    yield temp, f"127.0.0.1:{port}", token
    _kill_processes_under(temp)
    shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.parametrize("driver_token", ["wrong", None])
def test_a_refused_token_is_one_line_saying_how_to_set_it(project_dir, token_head, driver_token):
    """Ray 2.60 hides the AuthenticationError two causes down and retries it for 20 s with a C++ warning a
    second; the driver asks once and says what to set."""
    temp, address, _ = token_head
    with (project_dir / "rlflow.yaml").open("a") as fh:
        fh.write(f"ray: {{address: '{address}'}}\n")
    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    env = {"RAY_TMPDIR": str(temp), "RAY_AUTH_MODE": "token" if driver_token else "disabled"}
    env["RAY_AUTH_TOKEN"] = (driver_token or "") * 8
    start = time.monotonic()
    result = rlflow("run", "p.yaml", *small_sets("trainer.total_steps=1"), cwd=project_dir, env=env)
    took = time.monotonic() - start
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "refused this driver's token: set RAY_AUTH_MODE=token" in result.stderr, result.stderr[-3000:]
    assert "gcs_client.cc" not in result.stderr, "Ray's C++ warnings reached the console"
    assert took < 15, f"the refusal took {took:.1f} s"


def test_errors_the_cluster_pushes_go_to_the_log_one_line_each(caplog, monkeypatch):
    """Ray's driver prints what raylets push (a raylet's death: its last 20 log lines) as it arrives; rlflow logs
    the first line of each instead, and leaves every other stream (worker logs) to Ray's printer."""
    from types import SimpleNamespace

    from rlflow.runtime.cluster import relay_ray_errors

    monkeypatch.delenv("RLFLOW_DEBUG", raising=False)
    printed = []
    worker = SimpleNamespace(print_to_stdstream=lambda data, ignore_prefix: printed.append(data))
    ray = SimpleNamespace(_private=SimpleNamespace(worker=worker))
    relay_ray_errors(ray)
    relay_ray_errors(ray)  # once only: a second start does not wrap the wrapper
    dump = "Raylet is terminated. Termination is unexpected.\n" + "    [state-dump] ...\n" * 20
    with caplog.at_level("INFO", logger="rlflow.runtime"):
        worker.print_to_stdstream({"pid": "raylet", "lines": [dump], "is_err": False}, False)
        worker.print_to_stdstream({"pid": 42, "lines": ["a worker's own output"], "is_err": False}, False)
    assert [r.getMessage() for r in caplog.records] == ["Ray: Raylet is terminated. Termination is unexpected."]
    assert [d["pid"] for d in printed] == [42]
