"""How well a training update uses its device, reported as verl's engine workers report it.

verl's ``TrainingWorker`` adds to every mini-batch's metrics (which the trainer prefixes with
``actor/`` and averages over mini-batches) the peak device memory, the host's used memory and
the model FLOPs utilisation, renamed ``perf/mfu/actor``. Design decisions:

- MFU is verl's: the achieved TFLOPS of verl's per-architecture formula
  (``verl.utils.flops_counter``: 6 x dense parameters per token plus the attention term over
  each sequence's squared length) for the mini-batch's sequences on every data-parallel rank
  and the seconds this rank spent on it, over the device's peak, over the world size. A model
  type verl has no formula for gives 0, as in verl.
- The peak is verl's table (``get_device_flops``): dense bf16 TFLOPS by device name (989 for
  H100/H200, 312 for A100, ...; an unknown GPU is infinite, so its MFU is 0). On the CPU it is
  verl's ``CPU`` entry, 0.448 TFLOPS: verl's own nominal figure, not a measurement of this
  machine, so a CPU run's MFU compares runs with each other, not with a GPU's.
- Memory: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` in GiB since the process
  started (verl never resets the peak), and ``psutil``'s used host memory. On the CPU the device
  figures are 0, which is what verl's own code reports there (its device module falls back to
  ``torch.cuda``, whose counters stay 0 without a GPU), so the keys are the same on every device.
"""

from __future__ import annotations

import torch

GIB = 1024**3


def peak_tflops(device: torch.device) -> float:
    """verl's nominal peak of ``device`` in TFLOPS (``inf`` for a GPU verl does not know)."""
    from verl.utils.flops_counter import get_device_flops

    name = "CPU" if device.type == "cpu" else torch.cuda.get_device_name(device)
    return float(get_device_flops(unit="T", device_name=name))


def achieved_tflops(model_config, seqlens: list[int], seconds: float) -> float:
    """TFLOPS of one forward and backward over sequences of ``seqlens`` tokens taking ``seconds``."""
    from verl.utils.flops_counter import ESTIMATE_FUNC

    estimate = ESTIMATE_FUNC.get(model_config.model_type)
    if estimate is None or seconds <= 0:
        return 0.0
    return float(estimate(model_config, sum(seqlens), seqlens, seconds))


def update_perf_metrics(
    model_config, device: torch.device, peak: float, seqlens: list[int], seconds: float, world_size: int
) -> dict[str, float]:
    """``perf/mfu/actor`` and ``actor/perf/*memory*`` for one mini-batch (``seqlens``: every rank's rows)."""
    import psutil

    cuda = device.type == "cuda"
    return {
        "perf/mfu/actor": achieved_tflops(model_config, seqlens, seconds) / peak / world_size,
        "actor/perf/max_memory_allocated_gb": torch.cuda.max_memory_allocated(device) / GIB if cuda else 0.0,
        "actor/perf/max_memory_reserved_gb": torch.cuda.max_memory_reserved(device) / GIB if cuda else 0.0,
        "actor/perf/cpu_memory_used_gb": psutil.virtual_memory().used / GIB,
    }
