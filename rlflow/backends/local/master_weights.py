"""fp32 master weights for a model that computes in bf16 (or fp16): what the optimizer steps.

With ``model.dtype: bfloat16`` on a GPU the model keeps bf16 parameters, so the rollout, the
reference and every forward and backward run in bf16 with no casts, while the optimizer's
update (a tiny ``lr x step`` on a much larger weight, lost to bf16's 8-bit mantissa) happens on
fp32 copies, as verl's FSDP mixed precision keeps fp32 parameters for its optimizer. Design
decisions:

- Gradients accumulate in fp32: after each micro-batch's backward the bf16 gradient is added
  into the fp32 copy's gradient and dropped, so a mini-batch of many micro-batches sums in fp32.
- After the optimizer step the fp32 weights are copied (rounded) into the model's parameters.
- The fp32 copies ride in the trainer state of a checkpoint: a resumed run continues from the
  same fp32 weights, not from their bf16 rounding.
"""

from __future__ import annotations

import torch


class MasterWeights:
    """fp32 copies of ``params`` (half-precision parameters of one model), with their gradients."""

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params
        self.master = [torch.nn.Parameter(p.detach().float().clone()) for p in params]

    def gather_grads(self) -> None:
        """Add the model's gradients into the fp32 ones and drop the model's."""
        for p, m in zip(self.params, self.master):
            if p.grad is None:
                continue
            grad = p.grad.float()
            m.grad = grad if m.grad is None else m.grad.add_(grad)
            p.grad = None

    @torch.no_grad()
    def copy_to_model(self) -> None:
        for p, m in zip(self.params, self.master):
            p.copy_(m)

    def state_dict(self) -> list[torch.Tensor]:
        return [m.detach().cpu() for m in self.master]

    @torch.no_grad()
    def load_state_dict(self, tensors: list[torch.Tensor]) -> None:
        for m, t in zip(self.master, tensors, strict=True):
            m.copy_(t)
        self.copy_to_model()


def needs_master_weights(params: list[torch.nn.Parameter]) -> bool:
    """Half-precision parameters on a GPU (on the CPU the parameters are stepped as they are, as before)."""
    return bool(params) and params[0].is_cuda and params[0].dtype in (torch.bfloat16, torch.float16)
