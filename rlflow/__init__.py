"""rlflow: declarative GRPO post-training pipelines on Ray.

The layers, each knowing only the ones below it: ``schemas`` (pipeline format, loading,
validation; pure), ``plan`` (compile a valid spec into an ordered Plan; pure), ``stages``
(stage kinds), ``backends`` (where work happens: local torch engine, remote backends),
``runtime`` (Ray: pools, step loop, checkpoints), ``cli``.
"""

__version__ = "0.1.0"
