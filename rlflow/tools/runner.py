"""``ToolRunner``: the agent loop's side of the tool process; every call checked here before it is sent.

A call that cannot run is answered here with an error observation; the rest go to the tool process through the
sandbox, and whatever befalls them is an observation, never a crash. Design notes: docs/design/tools.md.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rlflow.sandbox.process import Names, Sandbox, SandboxError
from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.files import load_tool_config
from rlflow.tools.hermes import ToolCall
from rlflow.tools.observation import truncate
from rlflow.tools.report import ToolReport
from rlflow.tools.schema import ToolSchema, argument_error

CHILD = "rlflow.tools.child"
INVALID = "(invalid)"  # the metrics' name for calls of no known tool (unparsable, or a name the model made up)
SECONDS = "__seconds"  # rlflow.tools.child.SECONDS (the child module imports verl: not imported here)


class ToolError(SandboxError):
    """The tools cannot be loaded at all (named, with the reason)."""


@dataclass(frozen=True)
class ToolResult:
    """What one call gives back: the observation text, and for the metrics its tool, failure and seconds."""

    name: str
    text: str
    error: bool = False
    seconds: float = 0.0


class ToolRunner:
    """The tools of one ``multi_turn`` block, loaded once in their own process."""

    def __init__(self, config: MultiTurnConfig, root: str | Path, log_path: str | Path | None = None) -> None:
        """``log_path``: the tool log (the tool process's output and a line per failed call); None: output to
        this process's stderr, failures as warnings only."""
        root = Path(root)
        entries, paths = [], [str(root)]
        if config.tool_config_path:
            file = root / config.tool_config_path
            entries, problems = load_tool_config(file, root)
            if problems:
                raise ToolError(f"multi_turn.tool_config_path: {'; '.join(problems)}")
            paths.append(str(file.parent))
        function_file = str(root / config.function_tool_path) if config.function_tool_path else None
        if function_file:
            paths.append(str(Path(function_file).parent))
        self.scratch = tempfile.mkdtemp(prefix="rlflow-tools-")
        spec = {
            "tools": entries,
            "tool_config": config.tool_config_path,
            "function_tool_path": function_file,
            "paths": paths,
            "scratch": self.scratch,
            "max_chars": config.max_tool_response_length,
            "side": config.tool_response_truncate_side,
        }
        self.what = " and ".join(p for p in (config.tool_config_path, config.function_tool_path) if p)
        self.limit, self.side = config.max_tool_response_length, config.tool_response_truncate_side
        self.report = ToolReport(log_path)
        serving = f"the tools of {self.what}"
        names = Names(
            process="the tool process",
            loader="the tool process",
            loading=serving,
            references=(serving,),
            unknown=serving,
            keys=("multi_turn.tool_timeout_s", "multi_turn.tool_max_memory_mb"),
        )
        self._runner = Sandbox(
            CHILD,
            [json.dumps(spec)],
            root,
            config.tool_timeout_s,
            config.tool_max_memory_mb,
            log_path,
            names,
            ToolError,
        )
        raw = self._run([{"op": "schemas"}])[0]
        if raw.failure is not None:
            raise ToolError(f"the tools of {self.what} cannot report their schemas: {raw.detail}")
        self.schemas = {name: ToolSchema.model_validate(s) for name, s in json.loads(raw.text).items() if s}

    def _run(self, calls: list[dict]):
        return [row[0] for row in self._runner.run(calls)]  # ToolError, naming the tools, if they cannot start

    def call(self, calls: list[ToolCall], tools_kwargs: list[dict] | None = None) -> list[ToolResult]:
        """One result per call, in order; the runnable ones go to the tool process in one message.

        ``tools_kwargs``: per call, its row's verl ``tools_kwargs`` (``{tool: {"create_kwargs": {...}}}``),
        from the data, never from the model."""
        results: list[ToolResult | None] = []
        runnable = []
        kwargs_of = tools_kwargs or [{}] * len(calls)
        for call, row_kwargs in zip(calls, kwargs_of, strict=True):
            error = call.error or argument_error(call.name, call.arguments, self.schemas)
            if error is not None:
                name = call.name if call.name in self.schemas else INVALID  # a model-written name is no metric name
                kind = "unparsable call" if call.error else "bad arguments" if name != INVALID else "unknown tool"
                self.report.failed(name, kind, error)
                results.append(ToolResult(name, self._cut(error), error=True))
            else:
                results.append(None)
                runnable.append((len(results) - 1, call, _create_kwargs(row_kwargs, call.name)))
        if runnable:
            start = time.monotonic()
            outcomes = self._run(
                [{"name": c.name, "arguments": c.arguments, "create_kwargs": create} for _, c, create in runnable]
            )
            average = (time.monotonic() - start) / len(runnable)  # a failed call reports no time of its own
            for (index, call, _), outcome in zip(runnable, outcomes, strict=True):
                if outcome.failure is None:
                    seconds = outcome.extras.get(SECONDS, average)
                    results[index] = ToolResult(call.name, outcome.text, seconds=seconds)
                else:
                    seconds = self._runner.timeout_s if outcome.failure == "timeout" else average
                    self.report.failed(call.name, outcome.kind, outcome.detail)
                    text = self._cut(f"Error executing tool '{call.name}': {outcome.detail}")  # verl's wording
                    results[index] = ToolResult(call.name, text, error=True, seconds=seconds)
        return results  # type: ignore[return-value]

    def _cut(self, text: str) -> str:
        return truncate(text, self.limit, self.side)

    def rollout_done(self, metrics: dict[str, float]) -> None:
        """After a rollout: its ``tool/*`` metrics, to warn about a tool that keeps failing (not ``(invalid)``,
        whose calls all fail by definition)."""
        self.report.rollout_done({k: v for k, v in metrics.items() if not k.startswith(f"tool/{INVALID}/")})

    def close(self) -> None:
        self._runner.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _create_kwargs(tools_kwargs: dict, name: str) -> dict:
    """``tools_kwargs[name]["create_kwargs"]`` as verl's agent loop reads it; ``{}`` when absent or not a mapping."""
    entry = tools_kwargs.get(name)
    create = entry.get("create_kwargs") if isinstance(entry, dict) else None
    return create if isinstance(create, dict) else {}
