"""The local backend: torch + transformers on the CPU or GPUs, one fused worker per device.

``factory.create_local_engine`` builds the engine (``local_engine.LocalEngine``, or ``configured``'s for DeepSpeed
or vLLM); importing this package imports nothing heavy. Design notes: docs/design/local_engine.md.
"""
