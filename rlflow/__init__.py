"""rlflow: declarative GRPO post-training pipelines on Ray.

The layers, top to bottom; each imports only the layers below it (the import contracts in pyproject.toml,
checked by tests/test_layers.py): ``cli``; ``runtime``, ``testing`` and ``importers``; ``check``; ``plan``;
``stages``; ``backends``; ``tools``; ``data``; ``reward``; ``sandbox``; ``schemas``; ``metrics``; ``batch``,
``registry`` and ``io``; ``errors``. ``schemas`` and ``plan`` are pure (no torch, Ray, verl or transformers at
import), so ``rlflow validate`` starts in a fraction of a second. Design notes: docs/design/layers.md.
"""

__version__ = "0.1.0"
