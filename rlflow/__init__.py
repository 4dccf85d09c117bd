"""rlflow: declarative GRPO post-training pipelines on Ray.

The layers, top to bottom; each imports only the layers below it (the import contracts in
pyproject.toml, checked by tests/test_layers.py, hold the package to this list):

- ``cli``: typer commands, each a thin shell over the layers below;
- ``runtime`` (Ray pools, the step loop over an executor: Ray or in-process, checkpoints,
  sinks) and ``testing`` (the conformance kit for remote backends);
- ``check``: the validator, every rule that needs the stage registry, the plan or the backends;
- ``plan``: compile a valid pipeline into an ordered, immutable Plan; renderings. Pure;
- ``stages``: the stage kinds, one module each, with their role, config, reads/writes and run;
- ``backends``: where the work happens (the local torch engine, remote backends); they know no
  stage kinds;
- ``tools``: verl-format tools for multi-turn rollouts (the ``multi_turn`` block, the hermes
  parser, schemas, the tool process);
- ``data``: prompts, tokenizers, datasets and the sampler; ``reward``: reward building blocks;
- ``schemas``: the pipeline and project formats (parse, template, position, per-field
  validation). Pure;
- ``metrics``, ``batch``, ``registry`` and ``errors`` at the bottom.

"Pure" means no torch, Ray, verl or transformers at import, so ``rlflow validate`` starts in a
fraction of a second.
"""

__version__ = "0.1.0"
