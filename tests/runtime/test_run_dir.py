"""The run directory's files (appended records, truncation on resume) and its one-run-at-a-time lock."""

import os
import socket
import subprocess
import sys
import time

import pytest

from rlflow.errors import DataError, RunDirInUse
from rlflow.io import read_json_lines
from rlflow.runtime.run_dir import RunDir, latest_run
from rlflow.runtime.run_lock import claim_run_dir, holders, sweep_abandoned


def test_metrics_truncation_drops_later_steps_and_torn_lines(tmp_path):
    rd = RunDir(tmp_path / "p" / "r1")
    for step in range(0, 5):
        rd.append_metrics({"step": step, "x": step * 1.5})
    with (rd.path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 5, "x"')  # a crash mid-line
    assert rd.truncate_metrics_after(2) == 3
    assert [m["step"] for _, m in read_json_lines(rd.path / "metrics.jsonl", 1 << 20, DataError)] == [0, 1, 2]


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


def test_discard_removes_only_what_the_claim_created(tmp_path):
    (tmp_path / "runs").mkdir()
    lock = claim_run_dir(tmp_path / "runs" / "p" / "r1")
    RunDir(lock.path).append_metrics({"step": 1})  # steps without a checkpoint: nothing to resume
    lock.discard()
    lock.release()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and not any((tmp_path / "runs").iterdir())

    kept = tmp_path / "runs" / "p" / "other"
    kept.mkdir(parents=True)
    lock = claim_run_dir(tmp_path / "runs" / "p" / "r2")
    lock.discard()
    lock.release()
    assert [p.name for p in (tmp_path / "runs" / "p").iterdir()] == ["other"], "another run's parent stays"

    existing = tmp_path / "mine"
    existing.mkdir()
    lock = claim_run_dir(existing)
    lock.discard()
    lock.release()
    assert existing.is_dir(), "a directory the user made is never removed"


def _die_holding(path, *, checkpoint: bool = False) -> None:
    """A process that claims ``path`` (and may write a checkpoint), then aborts natively: no clean-up runs."""
    code = (
        "import os, sys\nfrom rlflow.runtime.run_lock import claim_run_dir\n"
        "lock = claim_run_dir(sys.argv[1])\n"
        "if sys.argv[2] == '1':\n    os.makedirs(os.path.join(sys.argv[1], 'checkpoints', 'step_1'))\n"
        "os.abort()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path), str(int(checkpoint))], capture_output=True)
    assert proc.returncode == -6, proc.stderr


def test_a_run_that_died_natively_is_swept_unless_resumable_and_a_live_one_never(tmp_path):
    root = tmp_path / "runs" / "p"
    _die_holding(root / "dead")
    _die_holding(root / "resumable", checkpoint=True)
    RunDir(root / "finished").write_resolved("name: p\n")
    claim_run_dir(root / "finished").release()  # a clean release empties the lock file: never swept
    holder = hold_lock_in_subprocess(root / "live")
    try:
        assert [(p.name, who) for p, who in holders(root)] == [
            ("live", f"pid {holder.pid} on host {socket.gethostname()}")
        ]
        swept = sweep_abandoned(root, lambda p: (p / "checkpoints" / "step_1").is_dir())
    finally:
        holder.kill()
        holder.wait()
    assert [p.name for p in swept] == ["dead"]
    assert sorted(p.name for p in root.iterdir()) == ["finished", "live", "resumable"]


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


def test_resume_latest_while_the_only_run_is_live_names_its_holder(project_dir):
    from runtime_helpers import REPO, rlflow

    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    holder = hold_lock_in_subprocess(project_dir / "runs" / "bird-grpo" / "starting")  # no step written yet
    try:
        result = rlflow("run", "p.yaml", "--resume", "latest", cwd=project_dir)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert f"is live (pid {holder.pid} on host {socket.gethostname()})" in result.stderr


@pytest.mark.parametrize(
    ("where", "says"),
    [
        ("afile", "it exists and is not a folder; choose another --run-dir"),
        ("afile/sub", "a part of the path is a file, not a folder"),
        ("/dev/null", "it exists and is not a folder"),
        ("x" * 300, "File name too long; choose a shorter --run-dir or pipeline name"),
        ("name", "File name too long; choose a shorter --run-dir or pipeline name"),
    ],
)
def test_a_run_directory_the_system_refuses_is_one_line(project_dir, where, says):
    from runtime_helpers import REPO, rlflow

    (project_dir / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo.yaml").read_text())
    (project_dir / "afile").write_text("")
    args = ("--set", "name=" + "n" * 300) if where == "name" else ("--run-dir", where)
    result = rlflow("run", "p.yaml", *args, cwd=project_dir, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "as the run directory" in errors[0] and says in errors[0], result.stderr[-2000:]
