"""The tool process: load verl tools once, then run the calls the parent sends, each as verl's agent loop does.

It runs in the sandbox (``rlflow.sandbox``) with its guarantees; tools are built and called as verl builds and
calls them, and answers are cut and worded here. Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future

from rlflow.sandbox.guard import contain
from rlflow.sandbox.worker import Answers, LoadFailure, exit_with_parent, finite, serve
from rlflow.tools.observation import Where, truncate

SECONDS = "__seconds"  # the call's own time, among the numbers of its answer


class ToolLoadError(Exception):
    """A tool that cannot be loaded, named by its entry, with where its code failed."""


class Tools:
    """The loaded tools by name: verl ``BaseTool`` instances and ``FunctionTool`` entries."""

    def __init__(self, spec: dict) -> None:
        from verl.tools.function_tool import load_function_tools_from_path
        from verl.tools.schemas import OpenAIFunctionToolSchema

        self.spec = spec
        self.where = Where(spec["paths"][0], spec["paths"], spec["scratch"])
        self.tools = {}
        for i, entry in enumerate(spec["tools"]):
            module_name, _, class_name = entry["class_name"].rpartition(".")
            try:
                module = importlib.import_module(module_name)
                self.where.add_file(getattr(module, "__file__", None))
                cls = getattr(module, class_name)
                schema = entry.get("tool_schema")
                tool = cls(
                    config=entry.get("config") or {},
                    tool_schema=None if schema is None else OpenAIFunctionToolSchema.model_validate(schema),
                )
            except Exception as exc:
                where = f"{spec['tool_config']} tools[{i}] ({entry['class_name']})"
                raise ToolLoadError(f"{where}: {self._failed(exc)}") from exc
            self.tools[tool.name] = tool
        if spec.get("function_tool_path"):
            self.where.add_file(spec["function_tool_path"])
            try:
                functions = load_function_tools_from_path(spec["function_tool_path"])
            except Exception as exc:
                raise ToolLoadError(f"{spec['function_tool_path']}: {self._failed(exc)}") from exc
            for tool in functions:
                if tool.name in self.tools:
                    raise ToolLoadError(f"function tool {tool.name!r} is also declared in the tool config; rename one")
                self.tools[tool.name] = tool

    def _failed(self, exc: BaseException) -> str:
        return f"{type(exc).__name__} at {self.where.failure(exc)}"

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
        # the tool's own metrics are dropped, as verl's agent loop drops them: whatever their shape (a tuple
        # key, a list), they cannot break the answer
        if isinstance(tool, FunctionTool):
            response, reward, _ = normalize_function_tool_return(await tool.call(arguments))
        else:
            instance_id, _ = await tool.create(create_kwargs=create_kwargs)
            try:
                response, reward, _ = await tool.execute(instance_id, arguments)
            finally:
                await tool.release(instance_id)
        text = truncate(str(response.text or ""), self.spec["max_chars"], self.spec["side"])
        return ["ok", finite(reward) or 0.0, {SECONDS: time.monotonic() - start}, 0, text]


async def answer(tools: Tools, kwargs: dict) -> list:
    """One call's message without its id (see the module docstring)."""
    if kwargs.get("op") == "schemas":
        return ["ok", 0.0, {}, 0, tools.schemas()]
    try:
        return await tools.call(kwargs["name"], json.loads(kwargs["arguments"]), kwargs.get("create_kwargs") or {})
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit too: one call must not end the process serving the others
        return ["raised", type(exc).__name__, tools.where.failure(exc)]


async def settle(tools: Tools, kwargs: dict, future: Future) -> None:
    # set here, not through a done-callback: a later tool that blocks the loop must not hold back an answer
    future.set_result(await answer(tools, kwargs))


def answers(loop: asyncio.AbstractEventLoop, tools: Tools, calls: list) -> Iterator[list]:
    """Run a message's calls ``(id, index, kwargs)`` concurrently on ``loop`` (the rows of a turn); each
    call's answer in order, as it settles."""
    futures: list[Future] = [Future() for _ in calls]
    for (_, _, kwargs), future in zip(calls, futures, strict=True):
        asyncio.run_coroutine_threadsafe(settle(tools, kwargs, future), loop)
    for future in futures:
        yield future.result()


_M_ARENA_MAX = -8  # glibc's mallopt parameter


def _share_malloc_arenas() -> None:
    """Cap glibc's malloc arenas at two: each thread would otherwise reserve its own 64 MiB of address space,
    and verl runs every call of a plain ``@function_tool`` on a thread, so a turn's concurrent calls ran out
    of the capped address space ("can't start new thread")."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).mallopt(_M_ARENA_MAX, 2)


def _load(init: dict) -> Answers:
    _share_malloc_arenas()
    spec = json.loads(init["references"][0])
    sys.path[:0] = spec["paths"]
    sys.dont_write_bytecode = True
    sys.stdout = sys.stderr  # a tool's prints (verl's BaseTool prints its schema) are log lines, not results
    scratch = spec["scratch"]
    os.chdir(scratch)
    # before any import reads them (SQLite reads them once): a tool's temporary files land where it may write
    os.environ["TMPDIR"] = os.environ["SQLITE_TMPDIR"] = scratch
    try:
        import verl.tools.base_tool  # noqa: F401  (verl's own imports run before the guard)
        import verl.tools.function_tool  # noqa: F401

        unbounded = contain(scratch)
        if unbounded is not None:
            print(f"[rlflow: Landlock is not in force ({unbounded}): the audit hook alone guards the tools]")
        # after the guard: Landlock binds the threads started after it, and this one runs for the process's life
        exit_with_parent()
        tools = Tools(spec)
    except MemoryError:
        raise LoadFailure("MemoryError while loading the tools", 0) from None
    except ToolLoadError as exc:
        raise LoadFailure(str(exc), 0) from None
    except Exception as exc:  # verl's own imports
        raise LoadFailure(f"{type(exc).__name__}: {exc}", 0) from None
    # one loop for the process's life (a tool's async clients expect it), in its own thread, so that answers
    # already settled go out even while another call blocks it (the parent's deadline then ends the process)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="tools", daemon=True).start()
    return lambda calls: answers(loop, tools, calls)


def main(fd: int) -> None:
    """Serve the tools' calls on ``fd`` until the pipe closes (the watch on the parent starts after the guard)."""
    serve(fd, _load, watch_parent=False)
