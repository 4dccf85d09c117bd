"""Log-probabilities (and entropy) of response tokens under a model, micro-batched.

Design decisions:
- One forward over ``prompt + response`` with the attention mask of both (prompt left-padded,
  response right-padded after its EOS) and position ids from the mask, as generation used;
  only the last ``R + 1`` positions go through the LM head (``logits_to_keep``), since only
  the logits that predict response tokens are needed.
- Logits are divided by the rollout temperature before the softmax, as verl does, so that
  ``old_log_probs`` are the log-probs of the distribution the rollout sampled from.
- The per-token math is verl's (``logprobs_from_logits``, ``entropy_from_logits``); both run
  on the CPU. Positions outside ``response_mask`` hold finite values and are masked by every
  consumer (a row with an empty mask contributes nothing).
- The same ``forward_log_probs`` serves inference (under ``no_grad``) and the actor update
  (with gradients), so old and new log-probs come from identical code.
"""

from __future__ import annotations

import torch

from rlflow.batch import Batch


def forward_log_probs(model, prompts: torch.Tensor, prompt_mask: torch.Tensor, responses: torch.Tensor,
                      response_mask: torch.Tensor, *, temperature: float = 1.0,
                      with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log_probs`` [B, R] (and ``entropy`` [B, R] when asked) on the model's device."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    device = next(model.parameters()).device
    responses = responses.to(device)
    input_ids = torch.cat([prompts.to(device), responses], dim=1)
    mask = torch.cat([prompt_mask.to(device), response_mask.to(device)], dim=1).long()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    width = responses.shape[1]
    logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False,
                   logits_to_keep=width + 1).logits[:, :-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = logprobs_from_logits(logits, responses)
    entropy = entropy_from_logits(logits) if with_entropy else None
    return log_probs, entropy


@torch.no_grad()
def batch_log_probs(model, batch: Batch, *, micro_batch_size: int | None, temperature: float,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropy) of every row of ``batch``, ``micro_batch_size`` rows per forward, on the CPU."""
    size = micro_batch_size or max(len(batch), 1)
    log_probs, entropys = [], []
    for part in batch.chunks(size):
        lp, ent = forward_log_probs(model, part["prompts"], part["prompt_mask"], part["responses"],
                                    part["response_mask"], temperature=temperature, with_entropy=with_entropy)
        log_probs.append(lp.cpu())
        if ent is not None:
            entropys.append(ent.cpu())
    width = batch["responses"].shape[1]
    empty = torch.zeros((0, width))
    return (torch.cat(log_probs) if log_probs else empty,
            (torch.cat(entropys) if entropys else empty) if with_entropy else None)
