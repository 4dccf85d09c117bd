"""The guard: SQLite URIs read as SQLite reads them, and each standard-library way out refused.

The URI rules are checked against SQLite itself: every name the guard lets through outside the
working directory is one SQLite really opens read-only. The hook's refusals run in a fresh Python
process (a guard cannot be taken off again), each named by its own message, which is the hook's and
not the kernel's (Landlock refuses with a bare EACCES): so this holds where Landlock is missing too.
"""

from __future__ import annotations

import sqlite3

import pytest

from rlflow.sandbox.guard import sqlite_refusal, sqlite_uri


def test_sqlite_uris_are_parsed_as_sqlite_parses_them():
    assert sqlite_uri("file:///data/x.db?mode=ro&immutable=1") == ("/data/x.db", {"mode": ["ro"], "immutable": ["1"]})
    assert sqlite_uri("file://localhost/a%20b.db?m%6Fde=r%6F#frag") == ("/a b.db", {"mode": ["ro"]})
    assert sqlite_uri("file:x.db?mode=rwc&zmode=ro&mode=ro") == ("x.db", {"mode": ["rwc", "ro"], "zmode": ["ro"]})
    assert sqlite_uri("file:a+b.db?vfs=unix+none")[0] == "a+b.db"  # SQLite keeps '+' (no form decoding)


@pytest.mark.parametrize(
    ("name", "allowed"),
    [
        ("file:{db}?mode=ro", True),
        ("file:{db}?mode=rwc&zmode=ro", False),  # the issue's: passed a substring test
        ("file:{db}?mode=r%6F", True),
        ("file:{db}?m%6Fde=ro", True),
        ("file:{db}?mode=ro&mode=rw", False),
        ("file://localhost{db}?mode=ro", True),
        ("file:{db}#?mode=ro", False),
        ("file:{db}?mode=rw", False),
        ("file:{db}", False),
        ("{db}", False),
        ("{ro_folder}/p.db", False),  # a path containing mode=ro: passed the substring test
    ],
)
def test_what_the_guard_lets_through_sqlite_opens_read_only(tmp_path, name, allowed):
    outside = tmp_path / "outside"
    (outside / "mode=ro").mkdir(parents=True)
    db = outside / "p.db"
    sqlite3.connect(db).execute("CREATE TABLE t (x)").connection.close()
    database = name.format(db=db, ro_folder=outside / "mode=ro")
    assert (sqlite_refusal(database, str(tmp_path / "scratch")) is None) == allowed
    try:
        connection = sqlite3.connect(database, uri=True)
        connection.execute("CREATE TABLE u (x)")
        connection.commit()
        writable = True
    except sqlite3.Error:
        writable = False
    assert not (allowed and writable), f"{database!r} passes the guard, and SQLite writes it"


def test_inside_the_folder_and_in_memory_sqlite_may_write(tmp_path):
    folder = str(tmp_path)
    assert sqlite_refusal(":memory:", folder) is None and sqlite_refusal("", folder) is None
    assert sqlite_refusal(str(tmp_path / "own.db"), folder) is None
    assert sqlite_refusal("file::memory:?cache=shared", folder) is None
    assert sqlite_refusal(b"/elsewhere/x.db", folder).startswith("tools open SQLite databases outside")


ATTEMPTS = """
import ctypes, json, os, socket, sqlite3, subprocess, sys
from rlflow.sandbox.guard import contain

outside, inside = sys.argv[1], sys.argv[2]
os.chdir(inside)
contain(inside)
out = {}

def attempt(name, action):
    try:
        action()
        out[name] = "done"
    except Exception as exc:
        out[name] = f"{type(exc).__name__}: {exc}"

def fresh_posixsubprocess():
    del sys.modules["_posixsubprocess"]
    import _posixsubprocess  # noqa: F401

def open_beside(name):
    folder = os.open(outside, os.O_RDONLY)
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT, dir_fd=folder))

attempt("fork_exec", lambda: subprocess._fork_exec(*[None] * 23))
attempt("fresh_posixsubprocess", fresh_posixsubprocess)
attempt("ctypes_cdll", lambda: ctypes.CDLL(None))
attempt("ctypes_symbol", lambda: ctypes.pythonapi.PyRun_SimpleString)
attempt("mkfifo", lambda: os.mkfifo(os.path.join(outside, "fifo")))
attempt("mkfifo_inside", lambda: os.mkfifo("fifo"))
attempt("mknod", lambda: os.mknod(os.path.join(outside, "node")))
attempt("bind", lambda: socket.socket(socket.AF_UNIX).bind(os.path.join(outside, "sock")))
attempt("bind_inside", lambda: socket.socket(socket.AF_UNIX).bind("sock"))
attempt("bind_abstract", lambda: socket.socket(socket.AF_UNIX).bind("\\0rlflow-guard-test"))
attempt("open_dir_fd", lambda: open_beside("beside"))
attempt("sqlite_path_mode_ro", lambda: sqlite3.connect(os.path.join(outside, "mode=ro.db")))
if hasattr(sqlite3.Connection, "enable_load_extension"):  # absent where Python's sqlite3 is built without it
    attempt("sqlite_extension", lambda: sqlite3.connect(":memory:").enable_load_extension(True))
    attempt("sqlite_no_extension", lambda: sqlite3.connect(":memory:").enable_load_extension(False))
attempt("sqlite_inside", lambda: sqlite3.connect("own.db").execute("CREATE TABLE t (x)"))
attempt("tempfile", lambda: __import__("tempfile").mkstemp())
print(json.dumps(out))
"""


def test_each_way_out_is_refused_by_the_hook_itself(attempts, tmp_path):
    out, outside, inside = attempts(ATTEMPTS, {"TMPDIR": str(tmp_path / "inside")})
    assert sorted(p.name for p in outside.iterdir()) == []
    refused = {
        "fork_exec": "may not start a process (_posixsubprocess.fork_exec)",
        "fresh_posixsubprocess": "may not import a fresh _posixsubprocess",
        "ctypes_cdll": "may not ctypes.dlopen",
        "ctypes_symbol": "may not ctypes.dlsym",
        "mkfifo": "may not os.mkfifo",
        "mknod": "may not os.mknod",
        "bind": "may not bind a Unix socket",
        "open_dir_fd": "may not os.open 'beside'",
        "sqlite_path_mode_ro": "outside the working directory read-only",
        "sqlite_extension": "may not load SQLite extensions",
    }
    for name, words in refused.items():
        if name in out or name != "sqlite_extension":
            assert out[name].startswith("PermissionError") and words in out[name], (name, out[name])
    for name in ("mkfifo_inside", "bind_inside", "bind_abstract", "sqlite_no_extension", "sqlite_inside", "tempfile"):
        assert out.get(name, "done") == "done", (name, out[name])
