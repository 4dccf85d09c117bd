"""Deprecated: ``FunctionRunner`` and ``RewardFunctionError`` are in ``rlflow.reward.function_calls``, the rest in
``rlflow.sandbox``."""

import warnings

from rlflow.reward.function_calls import FunctionRunner, RewardFunctionError
from rlflow.sandbox.process import OUTPUT_CAP_BYTES
from rlflow.sandbox.protocol import Outcome, answer_of, metric_name

__all__ = ["OUTPUT_CAP_BYTES", "FunctionRunner", "Outcome", "RewardFunctionError", "answer_of", "metric_name"]

warnings.warn(
    "rlflow.reward.function_runner is deprecated; import from rlflow.reward.function_calls "
    "(FunctionRunner, RewardFunctionError) or rlflow.sandbox.process and rlflow.sandbox.protocol",
    DeprecationWarning,
    stacklevel=2,
)
