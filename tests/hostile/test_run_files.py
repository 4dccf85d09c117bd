"""A run's own files, read back by `rlflow plot` and `rlflow graph --timeline`, through the real CLI.

A run directory may come from anyone: a metrics.jsonl or trace.jsonl of any size is read in bounded
memory, a chart of 200,000 stage calls is drawn in bounded memory, and a line that is not UTF-8 or
nested 100,000 deep, an output suffix nothing can write, a full disk and ``-o /dev/full`` are each one
line naming the file, with no traceback and never "wrote".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile_inputs import REPO, rlflow

DEEP = b"[" * 100_000 + b"]" * 100_000


def one_line_error(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "wrote" not in result.stdout, result.stdout
    for text in expected:
        assert text in lines[0], (text, lines[0])


def a_run(folder: Path, steps: int = 5) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "metrics.jsonl").open("w") as out:
        out.writelines(json.dumps({"step": s, "critic/score/mean": s / steps}) + "\n" for s in range(1, steps + 1))
    with (folder / "trace.jsonl").open("w") as out:
        for step in range(1, steps + 1):
            for i, stage in enumerate(("generate", "reward", "update_actor")):
                start = 1.7e9 + 10 * step + 3 * i
                row = {"step": step, "stage": stage, "resource": "actor", "pid": 7, "start": start, "end": start + 2}
                out.write(json.dumps(row) + "\n")
    return folder


@pytest.mark.parametrize(("line", "said"), [(b"\xff\xfe", "not UTF-8 text"), (DEEP, "")])
def test_a_bad_line_in_a_run_file_is_one_line_naming_it(tmp_path, line, said):
    run = a_run(tmp_path / "run")
    for name in ("metrics.jsonl", "trace.jsonl"):
        path = run / name
        path.write_bytes(path.read_bytes() + line + b"\n")
    one_line_error(rlflow(tmp_path, "plot", "run", "-o", "c.png", timeout=120), "run/metrics.jsonl", said)
    # a trace line is at most 64 kB: the 200 kB deep line is refused for its length before it is parsed
    one_line_error(rlflow(tmp_path, "graph", "--timeline", "run", timeout=120), "run/trace.jsonl", said)


def test_outputs_nothing_can_write_are_one_line_each(tmp_path, tiny_disk):
    a_run(tmp_path / "run")
    one_line_error(rlflow(tmp_path, "plot", "run", "-o", "x.exe", timeout=120), "cannot draw 'x.exe'")
    one_line_error(rlflow(tmp_path, "graph", "--timeline", "run", "--render", "-o", "x.exe"), "use a .svg or .png")
    full = "/dev/full: cannot write: No space left on device"
    one_line_error(rlflow(tmp_path, "plot", "run", "-o", "/dev/full", timeout=120), full)
    one_line_error(rlflow(tmp_path, "graph", "--timeline", "run", "-o", "/dev/full", timeout=120), full)
    (tiny_disk / "filler").write_bytes(bytes(60 << 10))
    for args in (["plot", "run"], ["graph", "--timeline", "run", "--render"]):
        target = tiny_disk / "picture.svg"
        one_line_error(rlflow(tmp_path, *args, "-o", str(target), timeout=120), "No space left on device")
        assert not target.exists() and [p.name for p in tiny_disk.iterdir()] == ["filler"], "no partial picture"


def test_a_chart_of_200k_stage_calls_is_drawn_in_bounded_memory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    with (run / "trace.jsonl").open("w") as out:  # 25 MB: 8 workers, 6 stages, about 4,200 steps
        at = 1.7e9
        for n in range(200_000 // 48):
            for stage in ("generate", "reward", "old_log_prob", "ref_log_prob", "update_actor", "sync_weights"):
                for pid in range(8):
                    row = {
                        "step": n + 1,
                        "stage": stage,
                        "resource": "actor",
                        "pid": pid,
                        "start": at,
                        "end": at + 0.02,
                    }
                    out.write(json.dumps(row) + "\n")
                at += 0.03
    code = (
        "import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True); "
        "print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    command = [sys.executable, "-m", "rlflow.cli.main", "graph", "--timeline", "run", "--render", "-o", "t.png"]
    done = subprocess.run(
        [sys.executable, "-c", code, *command],
        cwd=tmp_path,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    code, peak_kb = map(int, done.stdout.split())
    assert code == 0, done.stderr[-2000:]
    assert peak_kb < 600_000, f"drawing 200k stage calls took {peak_kb / 1e3:.0f} MB"
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
