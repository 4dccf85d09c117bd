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
