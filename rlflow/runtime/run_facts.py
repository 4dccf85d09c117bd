"""What the console says about a run: the header's facts (model, steps, pools, sinks) and the details of the
load-data and start-Ray lines."""

from __future__ import annotations


def run_facts(spec, plan, sinks: list) -> list[tuple[str, str]]:
    """What the header says about a run: model, steps, pools, sinks (the console first)."""
    trainer = spec.trainer
    length = f"{trainer.total_steps} steps" if trainer.total_steps is not None else f"{trainer.total_epochs} epoch(s)"
    steps = [f"{length} of {trainer.train_batch_size} prompts x {spec.algorithm.n} samples"]
    every = {"validation": trainer.test_freq, "checkpoint": trainer.save_freq}
    steps += [f"{what} every {freq}" for what, freq in every.items() if freq > 0]
    facts = [("model", f"{spec.model.path} ({spec.model.dtype})"), ("steps", ", ".join(steps))]
    facts += [(f"pool {p.name}", _pool_facts(p)) for p in plan.resources.values() if p.type != "driver"]
    facts.append(("sinks", ", ".join([sinks[0].name, "metrics.jsonl", *(s.name for s in sinks[1:])])))
    return facts


def _pool_facts(placement) -> str:
    noun = "forwarder" if placement.type == "remote" else "worker"
    where = {"local": f"device {placement.device}", "remote": f"backend {placement.backend}"}.get(placement.type)
    count = f"{placement.workers} {noun}{'s' * (placement.workers != 1)}"
    return ", ".join(part for part in (placement.type, count, where) if part)


def data_facts(spec, data, total: int) -> str:
    """The load-data line's detail: prompts per split, what was left out, and the step count epochs give."""
    parts = []
    for split, ds in (("train", data.train), ("val", data.val)):
        if ds is None:
            continue
        left_out = {k: v for k, v in ds.stats.items() if k != "loaded" and v}
        extra = f" ({', '.join(f'{k} {v}' for k, v in left_out.items())})" if left_out else ""
        parts.append(f"{split} {len(ds)} prompts{extra}")
    if spec.trainer.total_steps is None:
        parts.append(f"{spec.trainer.total_epochs} epoch(s) = {total} steps")
    return ", ".join(parts)


def cluster_facts(project, started: bool, nodes: list[dict]) -> str:
    """The start-Ray line's detail: which Ray, and what it has."""
    cpus, gpus = (sum(n.total.get(key, 0.0) for n in nodes) for key in ("CPU", "GPU"))
    which = (
        f"joined {joined(project.ray.address)}" if project.ray.address else "embedded" if started else "already running"
    )
    return f"{which}, {len(nodes)} node{'s' * (len(nodes) > 1)}, {cpus:g} CPUs, {gpus:g} GPUs"


def joined(address: str) -> str:
    """``address`` and, when it does not say which cluster it found (``auto``, a host name), the GCS address
    joined: with several Ray instances on a host, "joined auto" would not tell them apart."""
    import ray

    try:
        gcs = ray.get_runtime_context().gcs_address
    except Exception:  # Ray Client (ray://) keeps the GCS address on the far side
        return address
    return address if not gcs or gcs == address else f"{address}: {gcs}"
