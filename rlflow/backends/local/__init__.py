"""The local backend: torch + transformers on the CPU or GPUs, one fused worker per device.

``local_engine.LocalEngine`` holds the actor, rollout and reference roles; ``models`` loads the
built-in tiny model or a local Hugging Face directory; ``generation`` samples with a KV
cache; ``logprob`` and ``actor`` compute log-probs and the GRPO update with verl's loss;
``checkpoint`` and ``distributed`` handle per-rank state and data parallelism; ``deepspeed_actor``
holds a DeepSpeed-wrapped actor.
``factory.create_local_engine`` picks ``LocalEngine`` or, when a pipeline asks for DeepSpeed
training or vLLM rollout, ``configured.ConfiguredLocalEngine``. Importing this package
imports nothing heavy: each module imports torch/transformers/verl itself.
"""
