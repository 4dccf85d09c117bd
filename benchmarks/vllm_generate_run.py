"""vLLM (CPU) next to rlflow's KV-cached sampling loop, in the vLLM venv, for bench_generation.py.

    .venv-vllm/bin/python benchmarks/vllm_generate_run.py --model-dir DIR --prompts ids.json --out out.json

Both arms run in this one process on the same token ids and sampling settings, alternating
rep by rep, so their ratio is as fair as the in-process comparison in bench_generation.py.

The vLLM engine is built the way rlflow's ``VllmRollout`` builds it (float32, eager, engine core
in-process, no prefix caching, one seed per row) with one difference: its token budget per
scheduler step holds the whole batch's prompts. With vLLM's default budget a large batch is
prefilled in chunks, and vLLM's CPU worker then fails on seeded rows ("CPU Generator does not
use offset") when it discards a partial chunk's token. Whether the shipped ``VllmRollout``
hits that at this batch size is checked first and recorded (``shipped_rollout``).
vLLM's start-up is timed separately and not counted in tokens/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
import gen_common  # noqa: E402


def shipped_rollout_check(model_dir: str, prompts, mask, params, max_model_len: int) -> dict:
    """One generate call through rlflow's VllmRollout as shipped, at the benchmark's batch."""
    from rlflow.backends.local.vllm_rollout import VllmRollout

    rollout = VllmRollout(model_dir, dtype="float32", seed=1, max_model_len=max_model_len, device="cpu")
    try:
        rollout.generate(prompts, mask, params)
        return {"status": "ok"}
    except Exception as exc:  # recorded, not raised: the direct engine below still measures vLLM
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:500]}
    finally:
        rollout.close()


class DirectVllm:
    """vllm.LLM as VllmRollout configures it, with a token budget that holds the whole batch."""

    def __init__(self, model_dir: str, max_model_len: int, rows: int, budget: int) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        from vllm import LLM

        self.llm = LLM(model=model_dir, tokenizer=model_dir, dtype="float32", seed=1, max_model_len=max_model_len,
                       enforce_eager=True, distributed_executor_backend="uni", enable_prefix_caching=False,
                       max_num_batched_tokens=budget, max_num_seqs=max(rows, 256))

    def generate(self, prompts, mask, params):
        import torch
        from vllm import SamplingParams as VllmSamplingParams
        from vllm.inputs import TokensPrompt

        from rlflow.backends.local.generation import response_mask_from_tokens

        inputs = [TokensPrompt(prompt_token_ids=[t for t, k in zip(r, m) if k])
                  for r, m in zip(prompts.tolist(), mask.bool().tolist())]
        sampling = [VllmSamplingParams(temperature=params.temperature, top_p=params.top_p, top_k=-1,
                                       seed=(params.seed + i) % (2**63), max_tokens=params.max_new_tokens,
                                       stop_token_ids=list(params.eos_token_ids), detokenize=False)
                    for i in range(len(inputs))]
        outputs = self.llm.generate(inputs, sampling, use_tqdm=False)
        out = torch.full((len(inputs), params.max_new_tokens), params.pad_token_id, dtype=torch.long)
        for i, result in enumerate(outputs):
            tokens = list(result.outputs[0].token_ids)[: params.max_new_tokens]
            if tokens:
                out[i, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        return out, response_mask_from_tokens(out, params.eos_token_ids)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--prompts", required=True, help="JSON list of token-id lists")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from rlflow.backends.local import generation
    from rlflow.backends.local.models import load_model, load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec(path=args.model_dir)
    tokenizer = load_tokenizer(spec, common.ROOT)
    model = load_model(spec, tokenizer, seed=1, root=common.ROOT).eval()
    rows = json.loads(Path(args.prompts).read_text())
    prompts, mask = gen_common.prompt_tensors(rows, tokenizer.pad_token_id)
    max_model_len = max(256, prompts.shape[1] + args.max_new_tokens)
    full = gen_common.sampling_params(tokenizer, model, args.max_new_tokens, seed=1)
    shipped = shipped_rollout_check(args.model_dir, prompts, mask, full, max_model_len)
    start = time.perf_counter()
    engine = DirectVllm(args.model_dir, max_model_len, len(rows), budget=max(8192, int(mask.sum()) + len(rows)))
    startup = time.perf_counter() - start
    arms = {
        "torch": lambda sp: generation.sample(model, prompts, mask, sp, use_cache=True),
        "vllm": lambda sp: engine.generate(prompts, mask, sp),
    }
    for fn in arms.values():
        fn(gen_common.sampling_params(tokenizer, model, 2, seed=0))
    calls: dict[str, list[dict]] = {name: [] for name in arms}
    for r, order in enumerate(common.rotations(list(arms), args.rounds)):
        for name in order:
            calls[name].append(gen_common.timed(arms[name], gen_common.sampling_params(tokenizer, model, args.max_new_tokens,
                                                                                       seed=1000 + r)))
    stats = {name: {"tokens_per_s_median": common.median(c["tokens_per_s"] for c in cs),
                    "seconds_median": common.median(c["seconds"] for c in cs),
                    "tokens_median": common.median(c["tokens"] for c in cs), "calls": cs} for name, cs in calls.items()}
    import importlib.metadata as md

    Path(args.out).write_text(json.dumps({
        "arms": stats, "vllm_startup_s": startup, "torch_threads": torch.get_num_threads(), "shipped_rollout": shipped,
        "versions": {m: md.version(m) for m in ("vllm-cpu", "torch", "transformers")},
        "ratio_vllm_over_torch": common.ratio(stats["vllm"]["tokens_per_s_median"], stats["torch"]["tokens_per_s_median"]),
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
