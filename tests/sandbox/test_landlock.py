"""Landlock, where the host has it: native code cannot write outside the folder nor run a program.

Each attempt runs in a fresh Python process restricted by ``restrict_to`` alone (no audit hook),
so what refuses it is the kernel. Skipped, with the reason, where the kernel offers no Landlock.
"""

from __future__ import annotations

import pytest

ATTEMPTS = """
import ctypes, json, os, socket, sqlite3, subprocess, sys
from rlflow.sandbox.landlock import restrict_to

outside, inside = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None)
why = restrict_to(inside)
out = {"why": why}

def attempt(name, action):
    try:
        out[name] = repr(action())
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"

if why is None:
    attempt("system", lambda: libc.system(f"echo escaped >> {outside}/system".encode()))
    attempt("run", lambda: subprocess.run(["/bin/sh", "-c", f"echo escaped >> {outside}/run"]))
    attempt("write", lambda: open(os.path.join(outside, "write"), "w"))
    attempt("attach", lambda: sqlite3.connect(":memory:").execute(f"ATTACH '{outside}/attach.db' AS a"))
    attempt("mkfifo", lambda: os.mkfifo(os.path.join(outside, "fifo")))
    attempt("bind", lambda: socket.socket(socket.AF_UNIX).bind(os.path.join(outside, "sock")))
    attempt("inside", lambda: open(os.path.join(inside, "own"), "w").write("mine"))
    attempt("read", lambda: len(open(sys.executable, "rb").read(4)))
    attempt("extension", lambda: __import__("_lzma").__name__)
print(json.dumps(out))
"""


def test_native_code_is_held_to_the_folder(attempts):
    out, outside, inside = attempts(ATTEMPTS)
    if out["why"] is not None:
        pytest.skip(out["why"])
    assert sorted(p.name for p in outside.iterdir()) == []
    assert out["system"] != "0"  # the shell could not be executed
    assert "Permission denied" in out["run"]
    for name in ("write", "mkfifo", "bind"):
        assert out[name].startswith("PermissionError"), (name, out[name])
    assert out["attach"].startswith("OperationalError: unable to open database")
    assert (out["inside"], out["read"], out["extension"]) == ("4", "4", "'_lzma'")
