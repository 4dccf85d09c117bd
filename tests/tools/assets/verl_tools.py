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
    """Does what its ``mode`` argument says: raise, hang, answer megabytes, eat memory, start a process, write."""

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
        return ToolResponse(text=f"fine: {mode}"), 0.0, {}
