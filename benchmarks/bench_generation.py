"""Rollout speed: rlflow's KV-cached sampling loop next to HF ``generate``, and vLLM where installed.

    python -m benchmarks.bench_generation            # 128 sequences (16 prompts x 8), 48 new tokens, 5 reps
    python -m benchmarks.bench_generation --quick    # 4 sequences, 4 tokens, 1 rep

Both in-process arms run on one model object (the benchmark model, float32, one thread as in a
pool worker), the same left-padded batch (16 train prompts, each repeated 8 times, as the
generate stage expands them) and the same sampling (temperature 1, top-p 1, no top-k, at most
48 new tokens, EOS stops a row):

- ``torch``: ``rlflow.backends.local.generation.sample`` (the ``engine: torch`` rollout);
- ``hf``: ``rlflow.backends.local.generation.sample_hf``, i.e. ``model.generate`` with its KV
  cache on (the ``engine: hf`` rollout).

Reps alternate between the arms (rotated each round); each arm is warmed up once first.
Throughput is generated tokens (the response mask, EOS included) per second; the goal is
torch >= 1.5x hf. vLLM lives in its own venv (scripts/setup_vllm_cpu_venv.sh): when
``.venv-vllm`` exists, vllm_generate_run.py measures vLLM and the torch loop interleaved in
that venv on the same token ids; otherwise the result says "not installed".
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import common, gen_common

NAME = "generation"
GOAL = 1.5


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=5)
    p.add_argument("--prompts", type=int, default=None, help="distinct prompts (default 16; --quick: 2)")
    p.add_argument("--n", type=int, default=None, help="samples per prompt (default 8; --quick: 2)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 48; --quick: 4")
    p.add_argument("--threads", type=int, default=1, help="torch threads (a pool worker has 1)")
    p.add_argument("--skip-vllm", action="store_true")
    p.add_argument("--vllm-timeout", type=float, default=1800)
    return p.parse_args(argv)


def load_prompts(model_dir: Path, count: int, n: int) -> list[list[int]]:
    """The token ids of the first training step's ``count`` prompts, each repeated ``n`` times."""
    from rlflow.check import load_pipeline
    from rlflow.data import StepSampler, load_split
    from rlflow.data.tokenizer import load_tokenizer

    spec = load_pipeline(common.ROOT / "pipelines" / "bird_grpo.yaml", [f"model_path={model_dir}"]).spec
    tokenizer = load_tokenizer(spec.model, common.ROOT)
    train = load_split(spec, "train", common.ROOT, tokenizer)
    indices = StepSampler(len(train), count, spec.trainer.seed, spec.data.shuffle).next_indices()
    return [list(train[i].input_ids) for i in indices for _ in range(n)]


def measure_in_process(model_dir: Path, rows: list[list[int]], max_new: int, rounds: int, threads: int) -> dict:
    import torch

    from rlflow.backends.local import generation
    from rlflow.backends.local.models import load_model
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    torch.set_num_threads(threads)
    spec = ModelSpec(path=str(model_dir))
    tokenizer = load_tokenizer(spec, common.ROOT)
    model = load_model(spec, tokenizer, seed=1, root=common.ROOT).eval()
    prompts, mask = gen_common.prompt_tensors(rows, tokenizer.pad_token_id)
    arms = {
        "torch": lambda sp: generation.sample(model, prompts, mask, sp, use_cache=True),
        "hf": lambda sp: generation.sample_hf(model, prompts, mask, sp),
    }
    for fn in arms.values():  # warm-up: lazy initialisation, allocator
        small = gen_common.sampling_params(tokenizer, model, 2, seed=0)
        fn(small)
    calls: dict[str, list[dict]] = {name: [] for name in arms}
    for r, order in enumerate(common.rotations(list(arms), rounds)):
        for name in order:
            result = gen_common.timed(arms[name], gen_common.sampling_params(tokenizer, model, max_new, seed=1000 + r))
            calls[name].append(result)
            print(
                f"  rep {r + 1}/{rounds} {name}: {result['tokens']} tokens in {result['seconds']:.2f} s "
                f"= {result['tokens_per_s']:.0f} tok/s",
                flush=True,
            )
    return calls


def measure_vllm(
    model_dir: Path, rows: list[list[int]], max_new: int, rounds: int, threads: int, timeout: float
) -> dict:
    if not common.VLLM_PYTHON.exists():
        return {"status": "not installed", "detail": "no .venv-vllm (bash scripts/setup_vllm_cpu_venv.sh creates it)"}
    work = common.ROOT / "runs" / "bench-generation"
    work.mkdir(parents=True, exist_ok=True)
    (work / "prompts.json").write_text(json.dumps(rows))
    out = work / "vllm.json"
    out.unlink(missing_ok=True)
    cmd = [
        str(common.VLLM_PYTHON),
        "-m",
        "benchmarks.vllm_generate_run",
        "--model-dir",
        str(model_dir),
        "--prompts",
        str(work / "prompts.json"),
        "--max-new-tokens",
        str(max_new),
        "--rounds",
        str(rounds),
        "--threads",
        str(threads),
        "--out",
        str(out),
    ]
    # vLLM's CPU worker pins its OpenMP threads (all cores by default) and then refuses
    # torch.set_num_threads: pin it to as many cores as the in-process arms get.
    env = common.bench_env(threads) | {"VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}" if threads > 1 else "0"}
    result = common.run_process(cmd, log=work / "vllm.log", timeout=timeout, env=env)
    if result["exit_code"] != 0 or not out.exists():
        return {"status": "failed", "exit_code": result["exit_code"], "detail": common.tail(work / "vllm.log")}
    return {"status": "measured", **json.loads(out.read_text())}


def arm_stats(calls: list[dict]) -> dict:
    return {
        "tokens_per_s_median": common.median(c["tokens_per_s"] for c in calls),
        "seconds_median": common.median(c["seconds"] for c in calls),
        "tokens_median": common.median(c["tokens"] for c in calls),
        "calls": calls,
    }


def speed_row(arms: dict) -> dict:
    """torch over hf tokens/s, round by round (the arms take turns; call i of each is round i)."""
    torch_arm, hf = arms.get("torch", {}), arms.get("hf", {})
    return common.round_ratio_row(
        NAME,
        "rollout tokens/s: rlflow KV-cache loop / HF generate",
        [c["tokens_per_s"] for c in torch_arm.get("calls", [])],
        [c["tokens_per_s"] for c in hf.get("calls", [])],
        f">= {GOAL}x",
        lambda r: r >= GOAL,
        f"medians {common.fmt(torch_arm.get('tokens_per_s_median'))} vs {common.fmt(hf.get('tokens_per_s_median'))} tok/s",
    )


def rows_from_report(report: dict) -> list[dict]:
    """The summary rows of a result file by the current rules: the speed row judged round by round,
    the vLLM row (informational) as written."""
    stored = [row for row in report.get("summary", []) if "HF generate" not in row["figure"]]
    return [speed_row(report.get("arms", {})), *stored]


def main(argv=None) -> None:
    args = parse_args(argv)
    prompts = args.prompts or (2 if args.quick else 16)
    n = args.n or (2 if args.quick else 8)
    max_new = args.max_new_tokens or (4 if args.quick else 48)
    rounds = args.rounds or (1 if args.quick else 5)
    model_dir, model_label = common.bench_model_dir()
    before = common.machine()
    rows = load_prompts(model_dir, prompts, n)
    print(
        f"{len(rows)} sequences, prompts {min(map(len, rows))}-{max(map(len, rows))} tokens, "
        f"max {max_new} new tokens, {rounds} reps per arm",
        flush=True,
    )
    arms = {
        name: arm_stats(calls)
        for name, calls in measure_in_process(model_dir, rows, max_new, rounds, args.threads).items()
    }
    speedup = common.ratio(arms["torch"]["tokens_per_s_median"], arms["hf"]["tokens_per_s_median"])
    vllm = (
        {"status": "skipped"}
        if args.skip_vllm
        else measure_vllm(model_dir, rows, max_new, rounds, args.threads, args.vllm_timeout)
    )
    table = [[name, a["tokens_per_s_median"], a["seconds_median"], a["tokens_median"]] for name, a in arms.items()]
    if vllm["status"] == "measured":
        table += [
            [f"{name} (vLLM venv)", a["tokens_per_s_median"], a["seconds_median"], a["tokens_median"]]
            for name, a in vllm["arms"].items()
        ]
    print(common.markdown_table(["engine", "tokens/s (median)", "seconds (median)", "tokens (median)"], table))
    print(f"torch / hf: {common.fmt(speedup)}x (goal >= {GOAL}x); vLLM: {vllm['status']}")
    rows_summary = [speed_row(arms)]
    if vllm["status"] == "measured":
        v = vllm["ratio_vllm_over_torch"]
        rows_summary.append(
            common.goal_row(
                NAME,
                "rollout tokens/s: vLLM (CPU) / rlflow KV-cache loop",
                v,
                "informational",
                None,
                f"{v:.2f}x" if v is not None else None,
            )
        )
    else:
        rows_summary.append(
            common.goal_row(
                NAME,
                "rollout tokens/s: vLLM (CPU)",
                None,
                "informational",
                None,
                vllm["status"],
                vllm.get("detail", "")[-200:],
            )
        )
    report = {
        "machine": {**before, "load_avg_1m_after": common.machine()["load_avg_1m"]},
        "model": model_label,
        "sequences": len(rows),
        "prompts": prompts,
        "n": n,
        "max_new_tokens": max_new,
        "threads": args.threads,
        "sampling": {"temperature": 1.0, "top_p": 1.0, "top_k": -1},
        "rounds": rounds,
        "arms": arms,
        "torch_over_hf": speedup,
        "vllm": vllm,
        "summary": rows_summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
