"""Stage kinds that misbehave on purpose, for the runtime's watchdog and restart tests.

Loaded as a plugin (rlflow.yaml ``plugins:``) in the driver and every worker, as a user's
own stage kinds would be.
"""

import os
import time
from pathlib import Path

from pydantic import Field

from rlflow.stages.base import StageConfig, StageKind
from rlflow.stages.registry import register_stage


class HangConfig(StageConfig):
    seconds: float = Field(3600.0, gt=0)


@register_stage
class Hang(StageKind):
    """Sleeps far past any watchdog: a hung worker."""

    name = "test_hang"
    config_model = HangConfig
    reads_fields = ("scores",)
    allowed_on = frozenset({"cpu", "local"})

    def run(self, batch, ctx):
        time.sleep(ctx.config.seconds)
        return batch


class DieOnceConfig(StageConfig):
    marker: str
    at_step: int = 2


@register_stage
class DieOnce(StageKind):
    """Kills its worker process (as kill -9 would) the first time it reaches ``at_step``."""

    name = "test_die_once"
    config_model = DieOnceConfig
    reads_fields = ("scores",)
    allowed_on = frozenset({"cpu", "local"})

    def run(self, batch, ctx):
        marker = Path(ctx.config.marker)
        if ctx.step == ctx.config.at_step and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(137)
        return batch


class AbortConfig(StageConfig):
    at_step: int = 1


@register_stage
class Abort(StageKind):
    """Aborts its process natively (SIGABRT, as a crashing extension would) at ``at_step``: no Python clean-up runs."""

    name = "test_abort"
    config_model = AbortConfig
    reads_fields = ("scores",)
    allowed_on = frozenset({"driver", "cpu", "local"})

    def run(self, batch, ctx):
        if ctx.step == ctx.config.at_step:
            os.abort()
        return batch


class DieInCollectiveConfig(StageConfig):
    marker: str
    at_step: int = 2
    rank: int = 1


@register_stage
class DieInCollective(StageKind):
    """On a data-parallel pool: rank ``rank`` dies (kill -9) once at ``at_step`` while the other ranks enter an
    all-reduce with it, so they fail with gloo's "Connection closed by peer", as during a real update."""

    name = "test_die_in_collective"
    config_model = DieInCollectiveConfig
    reads_fields = ("scores",)
    allowed_on = frozenset({"local"})

    def run(self, batch, ctx):
        import torch
        import torch.distributed as dist

        if ctx.step == ctx.config.at_step and ctx.rank == ctx.config.rank and not Path(ctx.config.marker).exists():
            Path(ctx.config.marker).write_text(str(os.getpid()))
            os._exit(137)
        if ctx.world_size > 1:
            dist.all_reduce(torch.zeros(1))
        return batch


class KillRayletConfig(StageConfig):
    marker: str
    at_step: int = 1


@register_stage
class KillRaylet(StageKind):
    """Kills its node's raylet (SIGKILL, as a crash or OOM kill would) once at ``at_step``: the node dies with
    every worker on it, as when a machine of the cluster is lost. The marker holds the node's Ray id."""

    name = "test_kill_raylet"
    config_model = KillRayletConfig
    reads_fields = ("scores",)
    allowed_on = frozenset({"cpu", "local"})

    def run(self, batch, ctx):
        import signal

        import ray

        marker = Path(ctx.config.marker)
        if ctx.step == ctx.config.at_step and not marker.exists():
            raylet = os.getppid()  # Ray's workers are the raylet's children
            assert Path(f"/proc/{raylet}/comm").read_text().strip() == "raylet", "not started by a raylet"
            marker.write_text(ray.get_runtime_context().get_node_id())
            os.kill(raylet, signal.SIGKILL)
            time.sleep(600)  # this process goes with its raylet
        return batch
