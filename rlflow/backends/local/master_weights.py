"""fp32 master weights for a model that computes in bf16 (or fp16): what the optimizer steps.

Gradients accumulate in fp32 copies held in one flat buffer; the optimizer steps those and the result is
copied back into the model's parameters. Design notes: docs/design/local_actor.md.
"""

from __future__ import annotations

import torch


class MasterWeights:
    """fp32 copies of ``params`` (half-precision parameters of one model), with their gradients.

    The copies are views into one flat fp32 buffer, and so are their gradients, so that the
    per-micro-batch gather and the per-step copy back are a few kernels whatever the number of
    tensors (about 290 each way on Qwen2.5-0.5B with one kernel per tensor).
    """

    def __init__(self, params: list[torch.nn.Parameter]) -> None:
        self.params = params
        self.sizes = [p.numel() for p in params]
        self.flat = torch.cat([p.detach().reshape(-1).float() for p in params])
        self.flat_grad = torch.zeros_like(self.flat)
        self.master = [torch.nn.Parameter(v.view_as(p)) for v, p in zip(self.flat.split(self.sizes), params)]
        self.grad_views = [v.view_as(p) for v, p in zip(self.flat_grad.split(self.sizes), params)]

    def gather_grads(self) -> None:
        """Add the model's gradients into the fp32 ones and drop the model's.

        One concatenation of the half gradients and one fp32 add (a copy on the first micro-batch
        after the optimizer's ``zero_grad``): bit for bit the per-tensor ``grad.float()`` then
        ``add_`` it replaces. A tensor without a gradient adds zeros and keeps ``grad`` None until
        one arrives, so the optimizer skips it as before.
        """
        grads = [p.grad for p in self.params]
        if all(g is None for g in grads):
            return
        flat = torch.cat(
            [p.new_zeros(n) if g is None else g.reshape(-1) for p, g, n in zip(self.params, grads, self.sizes)]
        )
        if all(m.grad is None for m in self.master):
            self.flat_grad.copy_(flat)
        else:
            self.flat_grad.add_(flat)
        for p, m, g, view in zip(self.params, self.master, grads, self.grad_views):
            if g is not None:
                m.grad = view
                p.grad = None

    @torch.no_grad()
    def copy_to_model(self) -> None:
        """The fp32 weights rounded into the model's parameters: one cast, one multi-tensor copy."""
        half = self.flat.to(self.params[0].dtype).split(self.sizes)
        torch._foreach_copy_(self.params, [h.view_as(p) for h, p in zip(half, self.params)])

    def state_dict(self) -> list[torch.Tensor]:
        return [m.detach().to("cpu", copy=True) for m in self.master]

    @torch.no_grad()
    def load_state_dict(self, tensors: list[torch.Tensor]) -> None:
        for m, t in zip(self.master, tensors, strict=True):
            m.copy_(t)
        self.copy_to_model()


def needs_master_weights(params: list[torch.nn.Parameter]) -> bool:
    """Half-precision parameters on a GPU (on the CPU the parameters are stepped as they are, as before)."""
    return bool(params) and params[0].is_cuda and params[0].dtype in (torch.bfloat16, torch.float16)
