"""A stage kind that reports what its worker process has loaded, for the runtime's start-up tests.

Loaded as a plugin (rlflow.yaml ``plugins:``) in the driver and every worker.
"""

import sys

from rlflow.stages.base import StageKind
from rlflow.stages.registry import register_stage

PROBED = ("torch", "transformers", "verl")


@register_stage
class ModulesProbe(StageKind):
    """Adds ``probe/<module>_loaded`` metrics: 1.0 when the worker running it has imported the module."""

    name = "test_modules_probe"
    reads_fields = ("scores",)
    allowed_on = frozenset({"cpu", "local"})
    uses_torch = False

    def run(self, batch, ctx):
        batch.metrics.update({f"probe/{module}_loaded": float(module in sys.modules) for module in PROBED})
        return batch
