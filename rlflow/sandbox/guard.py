"""The guard of a contained worker (the tool process): it writes only under its folder and starts no process.

``contain(folder)`` sets the kernel's layer where the host has it (``rlflow.sandbox.landlock``)
and Python's audit hook everywhere, for good. Design notes: docs/design/sandbox.md.
"""

from __future__ import annotations

import _posixsubprocess
import os
import posix
import socket
import sqlite3
import sys
from urllib.parse import unquote

from rlflow.sandbox.landlock import restrict_to

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_REFUSED = {
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.utime", "shutil.rmtree", "shutil.move", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn", "os.putenv", "os.unsetenv",
    "ctypes.dlopen", "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.call_function",
    "sqlite3.load_extension",
}  # fmt: skip
_INSIDE_OK = {"os.mkdir": 2, "os.remove": 1, "os.rmdir": 1, "os.utime": 3, "os.chmod": 2}  # event: its dir_fd
_REPLACED = {"_posixsubprocess", "posix"}  # modules whose functions are replaced: a fresh copy would restore them
_MEMORY = ("", ":memory:")  # SQLite's in-memory and private temporary databases (temp files go to TMPDIR)


def _where(path, dir_fd: int | None = None) -> str:
    """Where ``path`` (relative to ``dir_fd`` when given, else to the working directory) really is; audit
    events give -1 for no ``dir_fd``."""
    base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None and dir_fd >= 0 else os.getcwd()
    return os.path.realpath(os.path.join(base, os.fsdecode(path)))


def _inside(path, folder: str, dir_fd: int | None = None) -> bool:
    if isinstance(path, int):  # an already open descriptor
        return True
    real = _where(path, dir_fd)
    return real == folder or real.startswith(folder + os.sep)


def sqlite_uri(uri: str) -> tuple[str, dict[str, list[str]]]:
    """The path and query parameters of a ``file:`` URI as SQLite reads them (``sqlite3ParseUri``): percent
    escapes decoded in both, ``+`` kept, every value of a key repeated, the ``#`` fragment ignored."""
    rest = uri[len("file:") :].split("#", 1)[0]
    path, _, query = rest.partition("?")
    authority, slash, rest = path[2:].partition("/")
    if path.startswith("//") and authority in ("", "localhost"):  # SQLite refuses any other authority
        path = slash + rest
    params: dict[str, list[str]] = {}
    for pair in filter(None, query.split("&")):
        key, _, value = pair.partition("=")
        params.setdefault(unquote(key), []).append(unquote(value))
    return unquote(path), params


def sqlite_refusal(database, folder: str) -> str | None:
    """Why SQLite must not open ``database`` (as ``sqlite3.connect`` or ``ATTACH`` names it), or None.

    Anything goes inside ``folder`` and in memory; elsewhere only read-only: a ``file:`` URI whose every
    ``mode`` is ``ro`` (or ``memory``). A name starting ``file:`` is taken as a URI even where SQLite would
    take it as a file name: that file is then relative, and so inside the working directory anyway."""
    name = os.fsdecode(database)
    if name in _MEMORY:
        return None
    path = name
    if name.startswith("file:"):
        path, params = sqlite_uri(name)
        modes = params.get("mode", [])
        if path in _MEMORY or (modes and all(mode in ("ro", "memory") for mode in modes)):
            return None
    if _inside(path, folder):
        return None
    return (
        f"tools open SQLite databases outside the working directory read-only: {name!r} is not; "
        "connect to 'file:PATH?mode=ro' with uri=True"
    )


def _authorizer(folder: str):
    """SQLite's authorizer for every connection: ``ATTACH`` (which ``VACUUM INTO`` runs too) as ``connect``."""

    def authorize(action: int, arg1, arg2, db_name, trigger) -> int:
        if action == sqlite3.SQLITE_ATTACH and sqlite_refusal(arg1 or "", folder) is not None:
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    return authorize


def _authorized(connect, folder: str):
    """``sqlite3.connect`` whose connections carry the authorizer (the audit event comes too early to set it)."""

    def guarded(*args, **kwargs):
        connection = connect(*args, **kwargs)
        connection.set_authorizer(_authorizer(folder))
        return connection

    return guarded


def _refusing(what: str):
    def refused(*args, **kwargs):
        raise PermissionError(f"tools may not {what} (the tool process is contained)")

    return refused


def _inside_only(original, name: str, folder: str):
    """``os.<name>`` (``mkfifo``, ``mknod``; ``open`` for writing) refused for a path outside ``folder``."""

    def guarded(path, *args, dir_fd=None, **kwargs):
        flags = args[0] if name == "open" and args else kwargs.get("flags", 0)
        writes = name != "open" or bool(flags & _WRITE_FLAGS)
        if writes and not isinstance(path, int) and not _inside(path, folder, dir_fd):
            raise PermissionError(f"tools may not os.{name} {os.fsdecode(path)!r}: write under the working directory")
        return original(path, *args, dir_fd=dir_fd, **kwargs)

    return guarded


def _replace_unaudited(folder: str) -> None:
    """Replace the calls that raise no audit event, or one that does not say where (``os.open``'s omits its
    ``dir_fd``), and ``sqlite3.connect`` (to authorize what its connections run), wherever a module holds
    them: ``subprocess`` keeps ``fork_exec`` as ``_fork_exec``, ``os.supports_dir_fd`` holds ``os.open``."""
    replacements = {
        id(_posixsubprocess.fork_exec): _refusing("start a process (_posixsubprocess.fork_exec)"),
        id(sqlite3.connect): _authorized(sqlite3.connect, folder),
    }
    for name in ("mkfifo", "mknod", "open"):
        original = getattr(posix, name)
        replacements[id(original)] = _inside_only(original, name, folder)
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        for key, value in list(names.items()) if isinstance(names, dict) else ():
            if id(value) in replacements:
                names[key] = replacements[id(value)]
            elif isinstance(value, set) and any(id(member) in replacements for member in value):
                names[key] = {replacements.get(id(member), member) for member in value}


def _hook(folder: str):
    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if writes and path is not None and not _inside(path, folder):
                raise PermissionError(f"tools may not write {path!r}: write under the working directory")
        elif event == "sqlite3.connect":
            refusal = sqlite_refusal(args[0], folder)
            if refusal is not None:
                raise PermissionError(refusal)
        elif event == "sqlite3.enable_load_extension" and args[1]:  # disabling it, as sql_exec does, is fine
            raise PermissionError("tools may not load SQLite extensions (the tool process is contained)")
        elif event == "socket.bind":
            sock, address = args
            named = isinstance(address, str | bytes) and address[:1] not in ("", "\0", b"", b"\0")
            if sock.family == socket.AF_UNIX and named and not _inside(address, folder):  # abstract: no file
                raise PermissionError(
                    f"tools may not bind a Unix socket at {address!r}: bind it under the working directory"
                )
        elif event == "import" and args[0] in _REPLACED:
            raise PermissionError(f"tools may not import a fresh {args[0]} (the tool process is contained)")
        elif event in _REFUSED or event.startswith(("os.exec", "os.spawn")):
            if event in _INSIDE_OK and args and _inside(args[0], folder, args[_INSIDE_OK[event]]):
                return
            raise PermissionError(f"tools may not {event} (the tool process is contained)")

    return hook


def contain(folder: str) -> str | None:
    """Both layers for ``folder``, for good; None, or why the kernel's layer is not in force."""
    folder = os.path.realpath(folder)
    why = restrict_to(folder)  # first: it needs ctypes, which the hook refuses
    _replace_unaudited(folder)
    sys.addaudithook(_hook(folder))
    return why
