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
  the rollout's rows; MFU from verl's FLOPs formula (``verl.utils.flops_counter``: its
  forward-and-backward estimate, of which a forward is one third) over verl's peak for the
  device (989 TFLOPS dense bf16 for an H100/H200).
- **update**: ``update_actor`` on the same rows (advantages drawn from a seeded normal), its
  ``perf/mfu/actor`` as verl reports it.
- **run**: a 3-step ``rlflow run pipelines/bird_grpo.yaml`` with the actor pool on the device and
  the same model and sizes, and the per-stage seconds of steps 2-3 from its trace.

The model (``--quick`` aside) is built from a seed, never downloaded: Qwen2.5-0.5B's shape (24
layers, hidden 896, 14 heads, 2 KV heads, MLP 4864) with the built-in tokenizer's 1,277-token
vocabulary, saved once under ``runs/bench-gpu-model``. Random weights rarely emit EOS, so rows
run to the length limit: the decode figures are for full-length rows.

Goals (issue #19): rollout >= 5x HF ``generate`` and >= 30k tokens/s; update >= 35% MFU;
log-prob passes >= 40% MFU; ``old_log_prob`` no slower than ``ref_log_prob``. Without CUDA only
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
MODEL_DIR = common.ROOT / "runs" / "bench-gpu-model"
SHAPE_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
GOALS = {"rollout_over_hf": 5.0, "rollout_tokens_per_s": 30_000.0, "update_mfu": 0.35, "log_prob_mfu": 0.40}
# The sizes: (prompts, n, max response tokens, samples per update / log-prob micro-batch), full and --quick.
SIZES = {False: (16, 8, 256, 64, 128), True: (2, 2, 8, 4, 4)}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=3)
    p.add_argument("--set", dest="sets", action="append", default=[], help="extra pipeline --set (repeatable)")
    p.add_argument("--skip-run", action="store_true", help="leave out the 3-step rlflow run")
    p.add_argument("--timeout", type=float, default=600)
    return p.parse_args(argv)


def model_dir(quick: bool) -> Path:
    """The benchmark model's Hugging Face directory: the saved built-in one (--quick) or the random 0.5B."""
    if quick:
        return common.bench_model_dir()[0]
    if not (MODEL_DIR / "config.json").is_file():
        save_random_05b(MODEL_DIR)
    return MODEL_DIR


def save_random_05b(directory: Path, seed: int = 1) -> None:
    """A seeded random Qwen2 of Qwen2.5-0.5B's shape with the built-in tokenizer, saved in bf16."""
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
        **SHAPE_05B,
    )
    torch.manual_seed(seed)
    common.save_model_dir(Qwen2ForCausalLM(config).to(torch.bfloat16), tokenizer, directory)


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


def measure_passes(engine, spec, batch, rounds: int) -> dict[str, Any]:
    """Seconds and MFU of the actor's log-prob pass, the reference's, and one actor update."""
    from rlflow.backends.local.perf import achieved_tflops, peak_tflops
    from rlflow.batch import Batch

    rows, advantages = training_batch(engine, batch)
    config, peak = engine.model.config, peak_tflops(engine.device)
    lengths = seqlens(rows)
    micro = spec.trainer.log_prob_micro_batch_size_per_gpu
    passes = {
        "old_log_prob": lambda: engine.compute_log_prob(rows, {"micro_batch_size": micro}),
        "ref_log_prob": lambda: engine.compute_ref_log_prob(rows, {"micro_batch_size": micro}),
    }
    for fn in passes.values():
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in passes}
    for order in common.rotations(list(passes), rounds):
        for name in order:
            seconds[name].append(timed(engine.device, passes[name])[0])
    old = engine.compute_log_prob(rows, {"micro_batch_size": micro})
    ref = engine.compute_ref_log_prob(rows, {"micro_batch_size": micro})
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
    out: dict[str, Any] = {"tokens": sum(lengths), "peak_tflops": peak}
    for name, secs in seconds.items():
        median_s = common.median(secs)
        out[name] = {"seconds": median_s, "mfu": achieved_tflops(config, lengths, median_s) / 3 / peak}
    update_s = common.median(s for s, _ in updates)
    out["update_actor"] = {
        "seconds": update_s,
        "mfu": common.median(m.get("perf/mfu/actor") for _, m in updates),
        "mfu_whole_call": achieved_tflops(config, lengths, update_s) / peak,
    }
    return out


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


def summary(rollout: dict, passes: dict, run: dict | None, on_gpu: bool) -> list[dict]:
    """The results table's rows: goals apply to GPU figures only (``met`` None on the CPU)."""
    judge = (lambda ok: ok) if on_gpu else (lambda ok: None)  # noqa: E731
    rl, hf = rollout["rlflow"]["tokens_per_s"], rollout["hf_generate"]["tokens_per_s"]
    old, ref, upd = passes["old_log_prob"], passes["ref_log_prob"], passes["update_actor"]
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
            upd["mfu"],
            f">= {GOALS['update_mfu']:.0%}",
            judge(upd["mfu"] >= GOALS["update_mfu"]),
            f"{upd['mfu']:.1%}",
        ),
        common.goal_row(
            NAME,
            "log-prob MFU: old / ref",
            min(old["mfu"], ref["mfu"]),
            f">= {GOALS['log_prob_mfu']:.0%}, old no slower than ref",
            judge(min(old["mfu"], ref["mfu"]) >= GOALS["log_prob_mfu"] and old["seconds"] <= ref["seconds"] * 1.05),
            f"{old['mfu']:.1%} / {ref['mfu']:.1%} ({old['seconds']:.3f} vs {ref['seconds']:.3f} s)",
        ),
    ]
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
    directory = model_dir(args.quick)
    sets = pipeline_sets(directory, args.quick, device, args.sets)
    from rlflow.backends.local.local_engine import LocalEngine
    from rlflow.check import load_pipeline

    spec = load_pipeline(common.ROOT / PIPELINE, sets).spec
    engine = LocalEngine(spec, device=device, project_root=common.ROOT)
    parameters = sum(p.numel() for p in engine.model.parameters())
    batch = first_batch(spec, engine.tokenizer)
    before = common.machine()
    rollout = measure_rollout(engine, batch, rounds)
    passes = measure_passes(engine, spec, batch, rounds)
    engine.close()
    del engine
    if on_gpu:  # the run's worker gets the whole device
        torch.cuda.empty_cache()
    run = None if args.skip_run else measure_run(sets, args.timeout)
    report = {
        "machine": {
            **before,
            "device": torch.cuda.get_device_name() if on_gpu else "cpu",
            "torch": torch.__version__,
            "load_avg_1m_after": common.machine()["load_avg_1m"],
        },
        "model": "builtin:tiny-qwen2 (saved)" if args.quick else "random Qwen2, Qwen2.5-0.5B shape, bf16",
        "parameters": parameters,
        "sizes": dict(
            zip(("prompts", "n", "max_response_length", "micro_batch", "log_prob_micro_batch"), SIZES[args.quick])
        ),
        "sets": sets,
        "rounds": rounds,
        "rollout": rollout,
        "passes": passes,
        "run": run,
        "summary": summary(rollout, passes, run, on_gpu),
    }
    print(
        common.markdown_table(
            ["figure", "measured", "goal", "met"],
            [[r["figure"], r["measured_text"], r["goal"], str(r["met"])] for r in report["summary"]],
        )
    )
    if run is not None:
        print("run stages (s, steps 2-3): " + ", ".join(f"{k} {common.fmt(v)}" for k, v in run["stage_s"].items()))
    common.write_result(NAME, report, args.quick, args.out)
    return 0 if run is None or run["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
