"""Tools written for verl, used unchanged by the tests (a BaseTool subclass and hostile ones)."""

import asyncio
import time
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse


class AddTool(BaseTool):
    """verl's BaseTool contract: create / execute / calc_reward / release, state per instance."""

    def __init__(self, config: dict, tool_schema):
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict] = {}

    async def create(self, instance_id=None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id, response = await super().create(instance_id, **kwargs)
        self._instances[instance_id] = {"calls": 0}
        return instance_id, response

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        self._instances[instance_id]["calls"] += 1
        total = parameters["a"] + parameters["b"] + self.config.get("offset", 0)
        return ToolResponse(text=str(total)), await self.calc_reward(instance_id), {"calls": 1.0}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        return 0.5

    async def release(self, instance_id: str, **kwargs) -> None:
        del self._instances[instance_id]


class HostileTool(BaseTool):
    """Does what its ``mode`` says: raise, hang, answer megabytes, eat memory, spawn, write, escape, kill itself."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
        mode = parameters["mode"]
        if mode == "raise":
            raise RuntimeError("the tool broke")
        if mode == "hang":
            time.sleep(3600)
        if mode == "huge":
            return ToolResponse(text="x" * (8 << 20)), 0.0, {}
        if mode == "sleep":
            await asyncio.sleep(1.0)
            return ToolResponse(text="slept"), 0.0, {}
        if mode == "memory":
            hog = bytearray(4 << 30)
            return ToolResponse(text=str(len(hog))), 0.0, {}
        if mode == "spawn":
            import subprocess

            subprocess.Popen(["sleep", "600"])
            return ToolResponse(text="started"), 0.0, {}
        if mode == "write":
            with open(parameters["path"], "w") as handle:
                handle.write("overwritten")
            return ToolResponse(text="wrote it"), 0.0, {}
        if mode == "sqlite":
            import sqlite3

            sqlite3.connect(parameters["path"]).execute("CREATE TABLE t (x)")
            return ToolResponse(text="wrote it"), 0.0, {}
        if mode in ESCAPES:
            ESCAPES[mode](parameters["path"])
            return ToolResponse(text="escaped"), 0.0, {}
        if mode == "tuple_metric":  # verl's agent loop drops a tool's metrics, whatever their keys
            return ToolResponse(text="measured"), 0.0, {("calls", "ok"): 1.0, "nested": {"a": 1}}
        if mode == "kill":
            import os
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return ToolResponse(text=f"fine: {mode}"), 0.0, {}


def _fork_exec(path: str) -> None:
    """subprocess's own fork_exec, without Popen (and its audit event): a shell appends a line to ``path``."""
    import os
    import subprocess

    errpipe_read, errpipe_write = os.pipe()
    args = [b"/bin/sh", b"-c", f"echo escaped >> {path}".encode()]
    subprocess._fork_exec(
        args, [args[0]], True, (errpipe_write,), None, None, -1, -1, -1, -1, -1, -1,
        errpipe_read, errpipe_write, True, False, -1, None, None, None, -1, None, False,
    )  # fmt: skip
    os.close(errpipe_write)
    os.read(errpipe_read, 100)  # the exec's outcome
    os.close(errpipe_read)
    time.sleep(0.2)


def _sqlite(sql: str, database: str = ":memory:", uri: bool = False):
    def run(path: str) -> None:
        import sqlite3

        sqlite3.connect(database.format(path=path), uri=uri).execute(sql.format(path=path))

    return run


def _mkfifo(path: str) -> None:
    import os

    os.mkfifo(path)


def _unix_socket(path: str) -> None:
    import socket

    socket.socket(socket.AF_UNIX).bind(path)


def _ctypes_system(path: str) -> None:
    import ctypes

    ctypes.CDLL(None).system(f"echo escaped >> {path}".encode())


# ways out of the tool's folder through the standard library, each writing ``path`` (outside it) if it can
ESCAPES = {
    "fork_exec": _fork_exec,
    "ctypes_system": _ctypes_system,
    "sqlite_uri": _sqlite("CREATE TABLE t (x)", "file:{path}?mode=rwc&zmode=ro", uri=True),
    "sqlite_attach": _sqlite("ATTACH DATABASE '{path}' AS other"),
    "sqlite_vacuum_into": _sqlite("VACUUM INTO '{path}'"),
    "mkfifo": _mkfifo,
    "unix_socket": _unix_socket,
}
