"""The run directory's files (appended records, truncation on resume) and its one-run-at-a-time lock."""

import os
import socket
import subprocess
import sys
import time

import pytest

from rlflow.errors import RunDirInUse
from rlflow.runtime.run_dir import RunDir, latest_run
from rlflow.runtime.run_lock import claim_run_dir


def test_metrics_truncation_drops_later_steps_and_torn_lines(tmp_path):
    rd = RunDir(tmp_path / "p" / "r1")
    for step in range(0, 5):
        rd.append_metrics({"step": step, "x": step * 1.5})
    with (rd.path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 5, "x"')  # a crash mid-line
    assert rd.truncate_metrics_after(2) == 3
    assert [m["step"] for m in rd.read_metrics()] == [0, 1, 2]


def test_latest_run(tmp_path):
    assert latest_run(tmp_path, "p") is None
    a = RunDir(tmp_path / "p" / "a")
    a.write_resolved("name: p\n")
    assert latest_run(tmp_path, "p") == a.path


def hold_lock_in_subprocess(path):
    """A separate process that claims ``path`` and sleeps; its stdout's first line says it holds it."""
    code = (
        "import sys, time\nfrom rlflow.runtime.run_lock import claim_run_dir\n"
        "lock = claim_run_dir(sys.argv[1])\nprint('held', flush=True)\ntime.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_claim_fails_at_once_naming_the_holder_until_it_dies(tmp_path):
    path = tmp_path / "p" / "r1"
    holder = hold_lock_in_subprocess(path)
    try:
        start = time.monotonic()
        with pytest.raises(RunDirInUse, match=f"pid {holder.pid} on host {socket.gethostname()}"):
            claim_run_dir(path)
        assert time.monotonic() - start < 1
        assert path.is_dir(), "a refused claim removes nothing of the holder's"
    finally:
        holder.kill()  # SIGKILL: no clean-up runs, the operating system drops the lock
        holder.wait()
    lock = claim_run_dir(path)
    with pytest.raises(RunDirInUse, match=f"pid {os.getpid()}"):
        claim_run_dir(path)  # a second open file in the same process is refused too
    lock.release()
    claim_run_dir(path).release()


def test_discard_removes_only_what_the_claim_created_and_only_if_unused(tmp_path):
    (tmp_path / "runs").mkdir()
    lock = claim_run_dir(tmp_path / "runs" / "p" / "r1")
    RunDir(lock.path).write_resolved("name: p\n")
    lock.discard(("pipeline.resolved.yaml",))
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and not any((tmp_path / "runs").iterdir())

    lock = claim_run_dir(tmp_path / "runs" / "p" / "r2")
    RunDir(lock.path).append_metrics({"step": 1})
    lock.discard(("pipeline.resolved.yaml",))
    lock.release()
    assert (tmp_path / "runs" / "p" / "r2" / "metrics.jsonl").exists(), "a run that wrote a step is kept"

    existing = tmp_path / "mine"
    existing.mkdir()
    lock = claim_run_dir(existing)
    lock.discard(())
    lock.release()
    assert existing.is_dir(), "a directory the user made is never removed"


def test_run_and_resume_of_a_directory_in_use_are_refused_at_once(project_dir):
    from runtime_helpers import REPO, rlflow

    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    run = project_dir / "runs" / "busy"
    holder = hold_lock_in_subprocess(run)
    try:
        for args in (("--run-dir", str(run)), ("--resume", str(run))):
            result = rlflow("run", "p.yaml", *args, cwd=project_dir)
            assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
            assert f"is in use by pid {holder.pid} on host {socket.gethostname()}" in result.stderr
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in run.iterdir()) == ["run.lock"], "the refused runs wrote nothing"
