"""The tool process: load verl tools once, then run the calls the parent sends, each as verl's agent loop does.

Started by ``rlflow.reward.function_runner.FunctionRunner(child="rlflow.tools.child")`` under the
reward functions' supervisor, so it has their guarantees (per-call deadline, every process it starts
killed, address-space cap, exit with its parent, output to a capped log) and their JSON protocol
(``rlflow.reward.function_child``); here the one "reference" is the JSON of the
tool set ({"tools": verl tool-config entries, "function_tool_path", "paths", "scratch", "max_chars",
"side"}); ``scratch`` is the parent's temporary folder, the child's working directory.

- ``BaseTool`` subclasses are built as verl's ``initialize_tools_from_config`` builds them
  (``cls(config=..., tool_schema=OpenAIFunctionToolSchema)``) and called per call as verl's
  ``ToolAgentLoop._call_tool``: ``create``, ``execute``, ``release``, the calls of one message (a
  turn's rows) concurrently on one event loop, as verl gathers them; ``@function_tool`` files load
  through verl's ``load_function_tools_from_path`` and answer through ``normalize_function_tool_return``.
- A call ``{"op": "schemas"}`` answers the tools' schemas as JSON; a call ``{"name", "arguments"}``
  answers ``["ok", id, reward, metrics and its own seconds, 0, text]`` with the text cut to ``max_chars``
  as verl cuts it, so a tool returning megabytes sends back a bounded message.
- Before the tools load, an audit hook refuses writes outside ``scratch`` (files
  opened for writing, removals, renames, SQLite files opened other than read-only) and new
  processes. It is Python-level containment: a tool's native code could still get past it.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection

from rlflow.reward.function_child import _exit_with_parent, _finite, _limit_memory, _send, last_frame

SECONDS = "__seconds"  # the call's own time, among the numbers of its answer
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_REFUSED = {
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.chown", "os.link",
    "os.symlink", "os.utime", "shutil.rmtree", "shutil.move", "os.system", "os.exec", "os.posix_spawn",
    "os.spawn", "os.fork", "os.forkpty", "subprocess.Popen", "pty.spawn", "os.putenv", "os.unsetenv",
}  # fmt: skip


def truncate(text: str, limit: int, side: str) -> str:
    """verl's cut of a tool answer longer than ``limit`` characters (``ToolAgentLoop._call_tool``)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return "(truncated)..." + text[-limit:]
    if side == "right":
        return text[:limit] + "...(truncated)"
    half = limit // 2
    return text[:half] + "...(truncated)..." + text[-half:]


def _inside(path, folder: str) -> bool:
    if isinstance(path, int):  # an already open descriptor
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real == folder or real.startswith(folder + os.sep)


def guard_writes(folder: str) -> None:
    """Refuse, from now on, writes outside ``folder`` and new processes (a ``PermissionError`` in the tool)."""
    folder = os.path.realpath(folder)

    def hook(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writes = (mode is not None and any(c in str(mode) for c in "wax+")) or bool((flags or 0) & _WRITE_FLAGS)
            if writes and path is not None and not _inside(path, folder):
                raise PermissionError(f"tools may not write {path!r}: write under the temporary folder {folder}")
        elif event == "sqlite3.connect":
            database = str(args[0])
            if database != ":memory:" and "mode=ro" not in database and not _inside(database, folder):
                raise PermissionError(f"tools open SQLite databases read-only: file:{database}?mode=ro with uri=True")
        elif event in _REFUSED or event.startswith("os.exec") or event.startswith("os.spawn"):
            path = args[0] if args else None
            if event in ("os.mkdir", "os.remove", "os.rmdir", "os.utime", "os.chmod") and path is not None:
                if _inside(path, folder):
                    return
            raise PermissionError(f"tools may not {event} (the tool process is contained)")

    sys.addaudithook(hook)


class Tools:
    """The loaded tools by name: verl ``BaseTool`` instances and ``FunctionTool`` entries."""

    def __init__(self, spec: dict) -> None:
        from verl.tools.function_tool import load_function_tools_from_path
        from verl.tools.schemas import OpenAIFunctionToolSchema

        self.spec = spec
        self.tools = {}
        for entry in spec["tools"]:
            module_name, _, class_name = entry["class_name"].rpartition(".")
            cls = getattr(importlib.import_module(module_name), class_name)
            schema = entry.get("tool_schema")
            tool = cls(
                config=entry.get("config") or {},
                tool_schema=None if schema is None else OpenAIFunctionToolSchema.model_validate(schema),
            )
            self.tools[tool.name] = tool
        if spec.get("function_tool_path"):
            for tool in load_function_tools_from_path(spec["function_tool_path"]):
                if tool.name in self.tools:
                    raise ValueError(f"function tool {tool.name!r} is also declared in the tool config; rename one")
                self.tools[tool.name] = tool

    def schemas(self) -> str:
        out = {}
        for name, tool in self.tools.items():
            schema = tool.tool_schema
            out[name] = schema.model_dump(exclude_unset=True, exclude_none=True) if schema is not None else None
        return json.dumps(out)

    async def call(self, name: str, arguments: dict, create_kwargs: dict) -> list:
        from verl.tools.function_tool import FunctionTool, normalize_function_tool_return

        tool = self.tools[name]
        start = time.monotonic()
        if isinstance(tool, FunctionTool):
            response, reward, metrics = normalize_function_tool_return(await tool.call(arguments))
        else:
            instance_id, _ = await tool.create(create_kwargs=create_kwargs)
            try:
                response, reward, metrics = await tool.execute(instance_id, arguments)
            finally:
                await tool.release(instance_id)
        text = truncate(str(response.text or ""), self.spec["max_chars"], self.spec["side"])
        numbers = {k: float(v) for k, v in (metrics or {}).items() if _finite(v) is not None}
        numbers[SECONDS] = time.monotonic() - start
        return ["ok", _finite(reward) or 0.0, numbers, 0, text]


async def answer(tools: Tools, kwargs: dict) -> list:
    """One call's message without its id (see the module docstring)."""
    if kwargs.get("op") == "schemas":
        return ["ok", 0.0, {}, 0, tools.schemas()]
    try:
        return await tools.call(kwargs["name"], json.loads(kwargs["arguments"]), kwargs.get("create_kwargs") or {})
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: one call must not end the process serving the others
        return ["raised", type(exc).__name__, last_frame(exc)]


async def settle(tools: Tools, kwargs: dict, future: Future) -> None:
    # set here, not through a done-callback: a later tool that blocks the loop must not hold back an answer
    future.set_result(await answer(tools, kwargs))


def serve(loop: asyncio.AbstractEventLoop, tools: Tools, calls: list, conn: Connection) -> None:
    """Run a message's calls ``(id, index, kwargs)`` concurrently on ``loop`` (the rows of a turn), answering in order."""
    futures: list[Future] = [Future() for _ in calls]
    for (_, _, kwargs), future in zip(calls, futures, strict=True):
        asyncio.run_coroutine_threadsafe(settle(tools, kwargs, future), loop)
    for (call_id, _, _), future in zip(calls, futures, strict=True):
        kind, *rest = future.result()
        _send(conn, [kind, call_id, *rest])


def main(fd: int) -> None:
    conn = Connection(fd)
    _exit_with_parent()
    try:
        init = conn.recv()
    except EOFError:
        return
    _limit_memory(init["max_memory_mb"])
    spec = json.loads(init["references"][0])
    sys.path[:] = [*spec["paths"], *init["sys_path"]]
    sys.dont_write_bytecode = True
    sys.stdout = sys.stderr  # a tool's prints (verl's BaseTool prints its schema) are log lines, not results
    scratch = spec["scratch"]
    os.chdir(scratch)
    try:
        import verl.tools.base_tool  # noqa: F401  (verl's own imports run before the guard)
        import verl.tools.function_tool  # noqa: F401

        guard_writes(scratch)
        tools = Tools(spec)
    except MemoryError:
        _send(conn, ["failed", 0, "MemoryError while loading the tools"])
        return
    except Exception as exc:
        _send(conn, ["failed", 0, last_frame(exc)])
        return
    _send(conn, ["ready"])
    # one loop for the process's life (a tool's async clients expect it), in its own thread, so that answers
    # already settled go out even while another call blocks it (the parent's deadline then ends the process)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="tools", daemon=True).start()
    while True:
        try:
            calls = conn.recv()
        except EOFError:
            return
        serve(loop, tools, calls, conn)
