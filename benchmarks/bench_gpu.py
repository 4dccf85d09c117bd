"""GPU speed of the local pool, stage by stage, against the device's limits: rollout, log-probs, update, a run.

    python -m benchmarks.bench_gpu            # on a CUDA GPU: a random Qwen2.5-0.5B-shaped model, bf16
    python -m benchmarks.bench_gpu --quick    # anywhere (CPU): the built-in tiny model, tiny sizes

What it measures, on one batch of the shipped BIRD pipeline's first training step (16 prompts x
8 samples, responses up to 256 tokens; ``--quick``: 2 x 2, 8 tokens):

- **rollout**: the local engine's ``generate`` (what ``engine: torch`` runs on this device) next
  to today's dynamic-cache loop (``generation.sample_with_log_probs``) and HF ``generate``
  (``generation.sample_hf``), interleaved, warmed up once each (a captured CUDA graph is built
  in the warm-up); generated tokens (the response mask) per second, and the ratio to HF.
- **log-probs**: ``compute_log_prob`` (the actor's, with entropy) and ``compute_ref_log_prob`` on
  the rollout's rows; MFU two ways, side by side: verl's FLOPs formula
  (``verl.utils.flops_counter``: its forward-and-backward estimate, of which a forward is one
  third; every row's prompt counted) and the achieved MFU of the useful FLOPs
  (``perf.useful_flops``: each shared prompt once, no padding, the LM head on response tokens),
  both over verl's peak for the device (989 TFLOPS dense bf16 for an H100/H200). One call of
  each pass also runs under ``torch.profiler``: its Chrome trace and kernel table go next to the
  JSON (``<out stem>_traces/``), to show where ``old_log_prob`` and ``ref_log_prob`` differ.
- **update**: ``update_actor`` on the same rows (advantages drawn from a seeded normal), its
  ``perf/mfu/actor`` as verl reports it and the achieved MFU of the whole call.
- **packed**: the log-prob passes and the update again with packing and token-budget
  micro-batches on (``model.use_remove_padding``, ``trainer.use_dynamic_bsz``), to decide their
  GPU default from figures.
- **scale** (full size only): the rollout and the passes on a random Qwen2.5-1.5B-shaped model
  (28 layers, hidden 1536, 12 heads, 2 KV heads, MLP 8960; bf16), so cost growth is measured.
- **run**: a 3-step ``rlflow run pipelines/bird_grpo.yaml`` with the actor pool on the device and
  the same model and sizes, and the per-stage seconds of steps 2-3 from its trace.

The models (``--quick`` aside) are built from a seed, never downloaded: Qwen2.5-0.5B's shape (24
layers, hidden 896, 14 heads, 2 KV heads, MLP 4864) and 1.5B's, with the built-in tokenizer's
1,277-token vocabulary, saved once under ``runs/bench-gpu-model`` (and ``-1.5b``). The JSON is
written after every part, so a run cut short by a time limit keeps what it measured. Random weights rarely emit EOS, so rows
run to the length limit: the decode figures are for full-length rows.

Goals (issues #19 and #33): rollout >= 5x HF ``generate`` and >= 30k tokens/s; update >= 35%
achieved MFU; log-prob passes >= 40% achieved MFU; ``old_log_prob`` within 1.1x of
``ref_log_prob``. Without CUDA only
``--quick`` runs (its figures prove the path, they are no GPU figures).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from benchmarks import common

NAME = "gpu"
PIPELINE = "pipelines/bird_grpo.yaml"
COMMON_SHAPE = dict(max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
SHAPES = {
    "0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
    "1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
}
MODEL_DIRS = {"0.5b": common.ROOT / "runs" / "bench-gpu-model", "1.5b": common.ROOT / "runs" / "bench-gpu-model-1.5b"}
PACKED = ("model.use_remove_padding=true", "trainer.use_dynamic_bsz=true")
GOALS = {
    "rollout_over_hf": 5.0,
    "rollout_tokens_per_s": 30_000.0,
    "update_mfu": 0.35,
    "log_prob_mfu": 0.40,
    "old_over_ref": 1.1,
}
# The sizes: (prompts, n, max response tokens, samples per update / log-prob micro-batch), full and --quick.
SIZES = {False: (16, 8, 256, 64, 128), True: (2, 2, 8, 4, 4)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=3)
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra pipeline --set (repeatable)")
    p.add_argument("--skip-run", action="store_true", help="leave out the 3-step rlflow run")
    p.add_argument("--skip-scale", action="store_true", help="leave out the 1.5B-class point")
    p.add_argument("--skip-packed", action="store_true", help="leave out the packed / token-budget passes")
    p.add_argument("--timeout", type=float, default=600)
    return p.parse_args(argv)


def model_dir(quick: bool, size: str = "0.5b") -> Path:
    """The benchmark model's Hugging Face directory: the saved built-in one (--quick) or a random Qwen2 of ``size``."""
    if quick:
        return common.bench_model_dir()[0]
    directory = MODEL_DIRS[size]
    if not (directory / "config.json").is_file():
        save_random(directory, SHAPES[size])
    return directory


def save_random(directory: Path, shape: dict, seed: int = 1) -> None:
    """A seeded random Qwen2 of ``shape`` with the built-in tokenizer, saved in bf16 (built on the GPU when there is one)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    tokenizer = load_tokenizer(ModelSpec())
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        **COMMON_SHAPE,
        **shape,
    )
    torch.manual_seed(seed)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # a CPU init of 1.5B takes tens of seconds
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    common.save_model_dir(model.cpu(), tokenizer, directory)


def pipeline_sets(directory: Path, quick: bool, device: str, extra: list[str]) -> list[str]:
    prompts, n, length, micro, log_prob_micro = SIZES[quick]
    return [
        f"model_path={directory}",
        f"model.dtype={'float32' if device == 'cpu' else 'bfloat16'}",
        f"resources.actor_pool.device={device}",
        f"trainer.train_batch_size={prompts}",
        f"algorithm.n={n}",
        f"data.max_response_length={length}",
        f"trainer.ppo_mini_batch_size={prompts}",
        f"trainer.ppo_micro_batch_size_per_gpu={micro}",
        f"trainer.log_prob_micro_batch_size_per_gpu={log_prob_micro}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        *extra,
    ]


def first_batch(spec, tokenizer):
    """The first training step's prompts, each repeated n times, as the generate stage lays them out."""
    from rlflow.data import StepSampler, load_split

    train = load_split(spec, "train", common.ROOT, tokenizer)
    indices = StepSampler(len(train), spec.trainer.train_batch_size, spec.trainer.seed, spec.data.shuffle)
    rows = [i for i in indices.next_indices() for _ in range(spec.algorithm.n)]
    return train.to_batch(rows, tokenizer.pad_token_id)


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device, fn) -> tuple[float, Any]:
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def measure_rollout(engine, batch, rounds: int) -> dict[str, Any]:
    """Tokens per second of the engine's rollout, today's dynamic-cache loop and HF generate, interleaved."""
    from rlflow.backends.local import generation

    params = {"temperature": 1.0, "seed": 0}
    sp = engine._sampling_params(params)
    model, prompts, mask = engine.model, batch["prompts"], batch["prompt_mask"]
    arms = {
        "rlflow": lambda: engine.generate(batch, params)["response_mask"],
        "dynamic_cache_loop": lambda: generation.sample_with_log_probs(model, prompts, mask, sp)[1],
        "hf_generate": lambda: generation.sample_hf(model, prompts, mask, sp)[1],
    }
    for fn in arms.values():  # warm-up: allocator, kernels, graph capture
        fn()
    calls: dict[str, list[dict]] = {name: [] for name in arms}
    for order in common.rotations(list(arms), rounds):
        for name in order:
            seconds, response_mask = timed(engine.device, arms[name])
            tokens = int(response_mask.sum())
            calls[name].append({"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds})
    out = {
        name: {"tokens_per_s": common.median(c["tokens_per_s"] for c in runs), "calls": runs}
        for name, runs in calls.items()
    }
    out["over_hf"] = common.ratio(out["rlflow"]["tokens_per_s"], out["hf_generate"]["tokens_per_s"])
    return out


def training_batch(engine, batch):
    """The rollout's rows with what the update reads: old and reference log-probs, seeded advantages."""
    import torch

    from rlflow.batch import Batch

    rolled = engine.generate(batch, {"temperature": 1.0, "seed": 0})
    keep = {"prompts": batch, "prompt_mask": batch, "responses": rolled, "response_mask": rolled}
    rows = Batch({key: source[key] for key, source in keep.items()})
    generator = torch.Generator().manual_seed(0)
    advantages = torch.randn((len(rows), 1), generator=generator) * rows["response_mask"]
    return rows, advantages


def seqlens(rows) -> list[int]:
    return (rows["prompt_mask"].sum(-1) + rows["response_mask"].sum(-1)).tolist()


def prompt_groups(rows, parts: list[list[int]], shared: bool) -> list[tuple[int, list[int]]]:
    """(prompt tokens, [response tokens per row]) per run of one prompt within each micro-batch of ``parts``."""
    from rlflow.backends.local.generation import shared_prompt_starts

    groups: list[tuple[int, list[int]]] = []
    for part in parts:
        micro = rows.index(part)
        prompt_tokens = micro["prompt_mask"].sum(-1).tolist()
        responses = micro["response_mask"].sum(-1).tolist()
        starts = shared_prompt_starts(micro["prompts"], micro["prompt_mask"]) if shared else None
        firsts = [True] * len(part) if starts is None else starts.tolist()
        for i, first in enumerate(firsts):
            if first:
                groups.append((prompt_tokens[i], []))
            groups[-1][1].append(responses[i])
    return groups


def pass_parts(engine, rows, micro: int | None, max_tokens: int | None) -> list[list[int]]:
    from rlflow.backends.local.micro_batches import micro_batch_rows

    packed = engine.pipeline.model.use_remove_padding
    return micro_batch_rows(rows, micro_batch_size=micro, max_token_len=max_tokens, keep_groups=not packed)


def profile_passes(engine, passes: dict, folder: Path) -> dict[str, str]:
    """One call of each pass under ``torch.profiler``: a Chrome trace and a kernel table per pass, in ``folder``."""
    from torch.profiler import ProfilerActivity, profile

    folder.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if engine.device.type == "cuda" else [])
    sort = "self_cuda_time_total" if engine.device.type == "cuda" else "self_cpu_time_total"
    out = {}
    for name, fn in passes.items():
        synchronize(engine.device)
        with profile(activities=activities) as prof:
            fn()
            synchronize(engine.device)
        trace = folder / f"{name}.trace.json"
        prof.export_chrome_trace(str(trace))
        table = prof.key_averages().table(sort_by=sort, row_limit=25)
        (folder / f"{name}.kernels.txt").write_text(table + "\n")
        out[name] = str(trace)
    return out


def measure_passes(engine, spec, batch, rounds: int, trace_dir: Path | None = None) -> dict[str, Any]:
    """Seconds and MFU (verl's formula and the useful FLOPs) of the actor's log-prob pass, the reference's, an update."""
    from rlflow.backends.local.perf import achieved_tflops, peak_tflops, useful_flops
    from rlflow.batch import Batch

    t = spec.trainer
    rows, advantages = training_batch(engine, batch)
    config, peak = engine.model.config, peak_tflops(engine.device)
    lengths = seqlens(rows)
    packed = spec.model.use_remove_padding
    log_prob_budget = (t.log_prob_max_token_len_per_gpu or t.ppo_max_token_len_per_gpu) if t.use_dynamic_bsz else None
    call = {"micro_batch_size": t.log_prob_micro_batch_size_per_gpu, "max_token_len": log_prob_budget}
    passes = {
        "old_log_prob": lambda: engine.compute_log_prob(rows, call),
        "ref_log_prob": lambda: engine.compute_ref_log_prob(rows, call),
    }
    for fn in passes.values():
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in passes}
    for order in common.rotations(list(passes), rounds):
        for name in order:
            seconds[name].append(timed(engine.device, passes[name])[0])
    traces = profile_passes(engine, passes, trace_dir) if trace_dir is not None else {}
    old = engine.compute_log_prob(rows, call)
    ref = engine.compute_ref_log_prob(rows, call)
    full = Batch(
        {
            **rows.tensors,
            "old_log_probs": old["old_log_probs"],
            "ref_log_prob": ref["ref_log_prob"],
            "advantages": advantages,
        }
    )
    updates = []
    for step in range(rounds + 1):  # the first update builds the optimizer state: not counted
        updates.append(timed(engine.device, lambda step=step: engine.update_actor(full, {"global_steps": step + 1})))
    updates = updates[1:]
    log_prob_groups = prompt_groups(
        rows, pass_parts(engine, rows, call["micro_batch_size"], log_prob_budget), not packed
    )
    update_parts = pass_parts(
        engine, rows, t.ppo_micro_batch_size_per_gpu, t.ppo_max_token_len_per_gpu if t.use_dynamic_bsz else None
    )
    log_prob_flops = useful_flops(config, log_prob_groups, shared=not packed)
    update_flops = useful_flops(config, prompt_groups(rows, update_parts, not packed), shared=not packed)

    def achieved(work: float | None, secs: float) -> float | None:
        return None if work is None or not secs else work / secs / 1e12 / peak

    out: dict[str, Any] = {"tokens": sum(lengths), "peak_tflops": peak, "packed": packed, "traces": traces}
    for name, secs in seconds.items():
        median_s = common.median(secs)
        out[name] = {
            "seconds": median_s,
            "mfu": achieved_tflops(config, lengths, median_s) / 3 / peak,
            "mfu_achieved": achieved(None if log_prob_flops is None else log_prob_flops / 3, median_s),
        }
    update_s = common.median(s for s, _ in updates)
    out["update_actor"] = {
        "seconds": update_s,
        "mfu": common.median(m.get("perf/mfu/actor") for _, m in updates),
        "mfu_whole_call": achieved_tflops(config, lengths, update_s) * t.ppo_epochs / peak,
        "mfu_achieved": achieved(None if update_flops is None else update_flops * t.ppo_epochs, update_s),
    }
    out["old_over_ref"] = common.ratio(out["old_log_prob"]["seconds"], out["ref_log_prob"]["seconds"])
    return out


def engine_for(sets: list[str]):
    """A local engine on the benchmark's pipeline with ``sets``, and its spec."""
    from rlflow.backends.local.local_engine import LocalEngine
    from rlflow.check import load_pipeline

    spec = load_pipeline(common.ROOT / PIPELINE, sets).spec
    device = "gpu" if "resources.actor_pool.device=gpu" in sets else "cpu"
    return LocalEngine(spec, device=device, project_root=common.ROOT), spec


def release(engine=None) -> None:
    """Close ``engine`` and hand the device memory no longer used back (the 3-step run's worker needs it)."""
    import gc

    import torch

    if engine is not None:
        engine.close()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def measure_packed(sets: list[str], rounds: int) -> dict[str, Any]:
    """The passes with packing and token-budget micro-batches on (the same rows: the same seeded rollout)."""
    engine, spec = engine_for([*sets, *PACKED])
    try:
        return measure_passes(engine, spec, first_batch(spec, engine.tokenizer), rounds)
    finally:
        release(engine)


def measure_scale_point(size: str, device: str, extra: list[str]) -> dict[str, Any]:
    """The rollout (rlflow's engine only) and the passes, one round each, on the random model of ``size``."""
    import torch

    sets = pipeline_sets(model_dir(False, size), False, device, extra)
    engine, spec = engine_for(sets)
    try:
        batch = first_batch(spec, engine.tokenizer)
        params = {"temperature": 1.0, "seed": 0}
        engine.generate(batch, params)  # warm-up: the capture
        seconds, response_mask = timed(engine.device, lambda: engine.generate(batch, params)["response_mask"])
        tokens = int(response_mask.sum())
        passes = measure_passes(engine, spec, batch, 1)
        return {
            "parameters": sum(p.numel() for p in engine.model.parameters()),
            "rollout": {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds},
            "passes": passes,
            "max_memory_allocated_gb": torch.cuda.max_memory_allocated() / 1024**3 if torch.cuda.is_available() else 0,
        }
    finally:
        release(engine)


def measure_run(sets: list[str], timeout: float) -> dict[str, Any]:
    """A 3-step ``rlflow run``: per-stage seconds (median over steps 2-3) and step seconds from its trace."""
    work = common.ROOT / "runs" / "bench-gpu"
    result = common.run_rlflow(
        PIPELINE, [*sets, "trainer.total_steps=3"], work / "run", log=work / "run.log", timeout=timeout
    )
    later = [r for r in result["trace"] if r["step"] >= 2]
    stages: dict[str, list[float]] = {}
    for r in later:
        stages.setdefault(r["stage"], []).append(r["end"] - r["start"])
    steps = [m["timing_s/step"] for m in result["metrics"] if m.get("step", 0) >= 2 and "timing_s/step" in m]
    return {
        "exit_code": result["exit_code"],
        "error": result.get("error"),
        "step_s": common.median(steps),
        "stage_s": {name: common.median(secs) for name, secs in stages.items()},
        "mfu_actor": common.median(m.get("perf/mfu/actor") for m in result["metrics"] if m.get("step", 0) >= 2),
        "command": result["command"],
    }


def _mfu(entry: dict) -> float:
    """The figure a goal is judged on: the achieved MFU where the model type is covered, else verl's."""
    return entry["mfu_achieved"] if entry.get("mfu_achieved") is not None else entry["mfu"]


def _both(entry: dict) -> str:
    achieved = entry.get("mfu_achieved")
    return f"{achieved:.1%} achieved, {entry['mfu']:.1%} verl" if achieved is not None else f"{entry['mfu']:.1%} verl"


def summary(
    rollout: dict, passes: dict, run: dict | None, on_gpu: bool, packed: dict | None = None, scale: dict | None = None
) -> list[dict]:
    """The results table's rows: goals apply to GPU figures only (``met`` None on the CPU)."""
    judge = (lambda ok: ok) if on_gpu else (lambda ok: None)  # noqa: E731
    rl, hf = rollout["rlflow"]["tokens_per_s"], rollout["hf_generate"]["tokens_per_s"]
    old, ref, upd = passes["old_log_prob"], passes["ref_log_prob"], passes["update_actor"]
    log_prob_mfu = min(_mfu(old), _mfu(ref))
    rows = [
        common.goal_row(
            NAME,
            "rollout tokens/s: rlflow / HF generate",
            rollout["over_hf"],
            f">= {GOALS['rollout_over_hf']:.0f}x and >= {GOALS['rollout_tokens_per_s']:,.0f} tok/s",
            judge(rollout["over_hf"] >= GOALS["rollout_over_hf"] and rl >= GOALS["rollout_tokens_per_s"]),
            f"{rollout['over_hf']:.2f}x ({rl:,.0f} vs {hf:,.0f} tok/s)",
        ),
        common.goal_row(
            NAME,
            "update_actor MFU",
            _mfu(upd),
            f">= {GOALS['update_mfu']:.0%} achieved",
            judge(_mfu(upd) >= GOALS["update_mfu"]),
            _both(upd),
        ),
        common.goal_row(
            NAME,
            "log-prob MFU: old / ref",
            log_prob_mfu,
            f">= {GOALS['log_prob_mfu']:.0%} achieved, old within {GOALS['old_over_ref']}x of ref",
            judge(log_prob_mfu >= GOALS["log_prob_mfu"] and passes["old_over_ref"] <= GOALS["old_over_ref"]),
            f"{_both(old)} / {_both(ref)} ({old['seconds']:.3f} vs {ref['seconds']:.3f} s)",
        ),
    ]
    if packed is not None:
        p_old, p_upd = packed["old_log_prob"], packed["update_actor"]
        rows.append(
            common.goal_row(
                NAME,
                "packed + token budgets: old_log_prob / update_actor seconds",
                p_old["seconds"],
                "informational (vs unpacked)",
                None,
                f"{p_old['seconds']:.3f} vs {old['seconds']:.3f} s / {p_upd['seconds']:.3f} vs {upd['seconds']:.3f} s",
            )
        )
    if scale is not None:
        point = scale["passes"]
        rows.append(
            common.goal_row(
                NAME,
                "1.5B-class: rollout tok/s, update MFU",
                scale["rollout"]["tokens_per_s"],
                "informational",
                None,
                f"{scale['rollout']['tokens_per_s']:,.0f} tok/s, update {_both(point['update_actor'])}",
            )
        )
    if run is not None and run["step_s"] is not None:
        rows.append(
            common.goal_row(
                NAME,
                "3-step run: seconds per step (steps 2-3)",
                run["step_s"],
                "informational",
                None,
                f"{run['step_s']:.2f} s",
            )
        )
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.quick:
        print("bench_gpu: skipped, no CUDA GPU here (--quick runs on a CPU: it proves the path, not the speed)")
        return 0
    rounds = args.rounds or (1 if args.quick else 3)
    device = "gpu" if on_gpu else "cpu"
    sets = pipeline_sets(model_dir(args.quick), args.quick, device, args.sets)
    out_path = args.out or common.RESULTS / (f"{NAME}_quick.json" if args.quick else f"{NAME}.json")
    traces = out_path.with_name(out_path.stem + "_traces")
    report: dict[str, Any] = {
        "machine": {**common.machine(), "device": torch.cuda.get_device_name() if on_gpu else "cpu"},
        "model": "builtin:tiny-qwen2 (saved)" if args.quick else "random Qwen2, Qwen2.5-0.5B shape, bf16",
        "sizes": dict(
            zip(("prompts", "n", "max_response_length", "micro_batch", "log_prob_micro_batch"), SIZES[args.quick])
        ),
        "sets": sets,
        "rounds": rounds,
        "complete": False,
    }
    report["machine"]["torch"] = torch.__version__

    def save() -> None:  # after every part: a run cut short keeps what it measured
        common.write_result(NAME, report, args.quick, out_path)

    engine, spec = engine_for(sets)
    report["parameters"] = sum(p.numel() for p in engine.model.parameters())
    batch = first_batch(spec, engine.tokenizer)
    report["rollout"] = measure_rollout(engine, batch, rounds)
    save()
    report["passes"] = measure_passes(engine, spec, batch, rounds, trace_dir=traces)
    save()
    release(engine)
    del engine
    if not args.skip_packed:
        report["packed"] = measure_packed(sets, 1)
        save()
    if on_gpu and not args.skip_scale:
        report["scale"] = {"1.5b": measure_scale_point("1.5b", device, args.sets)}
        save()
    release()  # what the engines above left cached
    run = None if args.skip_run else measure_run(sets, args.timeout)
    report["run"] = run
    report["machine"]["load_avg_1m_after"] = common.machine()["load_avg_1m"]
    report["summary"] = summary(
        report["rollout"], report["passes"], run, on_gpu, report.get("packed"), report.get("scale", {}).get("1.5b")
    )
    report["complete"] = True
    print(
        common.markdown_table(
            ["figure", "measured", "goal", "met"],
            [[r["figure"], r["measured_text"], r["goal"], str(r["met"])] for r in report["summary"]],
        )
    )
    if run is not None:
        print("run stages (s, steps 2-3): " + ", ".join(f"{k} {common.fmt(v)}" for k, v in run["stage_s"].items()))
    print(f"profiler traces of both log-prob passes: {traces}")
    save()
    return 0 if run is None or run["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
