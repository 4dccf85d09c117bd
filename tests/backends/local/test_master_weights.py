"""fp32 master weights: gradients accumulate in fp32, steps land in the bf16 model, and the state round-trips."""

from __future__ import annotations

import torch

from rlflow.backends.local.master_weights import MasterWeights, needs_master_weights


def test_gradients_accumulate_in_fp32_and_steps_reach_the_model():
    param = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    master = MasterWeights([param])
    for _ in range(3):  # three micro-batches
        (param * torch.tensor(1e-3, dtype=torch.bfloat16)).sum().backward()
        master.gather_grads()
        assert param.grad is None
    assert master.master[0].grad.dtype == torch.float32
    assert torch.allclose(master.master[0].grad, torch.full((4,), 3 * float(torch.tensor(1e-3, dtype=torch.bfloat16))))
    optimizer = torch.optim.SGD(master.master, lr=1e-2)
    for _ in range(10):  # steps smaller than bf16's resolution at 1.0 add up in fp32
        optimizer.step()
    master.copy_to_model()
    assert master.master[0][0] < 1.0 and param.dtype == torch.bfloat16
    assert param[0] == master.master[0][0].to(torch.bfloat16)
    other = MasterWeights([torch.nn.Parameter(torch.zeros(4, dtype=torch.bfloat16))])
    other.load_state_dict(master.state_dict())
    assert torch.equal(other.master[0], master.master[0]) and torch.equal(other.params[0], param.detach())


def test_only_half_precision_gpu_parameters_get_master_weights():
    assert not needs_master_weights([torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))])  # the CPU: as before
    assert not needs_master_weights([])


class LoopMasters:
    """The per-tensor implementation the flat one replaced: the reference for bitwise equality."""

    def __init__(self, params):
        self.params = params
        self.master = [torch.nn.Parameter(p.detach().float().clone()) for p in params]

    def gather_grads(self):
        for p, m in zip(self.params, self.master):
            if p.grad is None:
                continue
            grad = p.grad.float()
            m.grad = grad if m.grad is None else m.grad.add_(grad)
            p.grad = None

    @torch.no_grad()
    def copy_to_model(self):
        for p, m in zip(self.params, self.master):
            p.copy_(m)


def test_flat_masters_equal_the_per_tensor_loop_bit_for_bit():
    """Two mini-batches of three micro-batches, AdamW, one tensor without a gradient: every bit the same."""

    def model():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(7, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3), torch.nn.Linear(3, 2))
        return net.to(torch.bfloat16)

    runs = []
    for cls in (LoopMasters, MasterWeights):
        net = model()
        params = list(net.parameters())
        masters = cls(params)
        optimizer = torch.optim.AdamW(masters.master, lr=1e-2, weight_decay=0.1)
        gen = torch.Generator().manual_seed(1)
        for _ in range(2):
            optimizer.zero_grad(set_to_none=True)
            for micro in range(3):
                x = torch.randn((4, 7), generator=gen).to(torch.bfloat16)
                hidden = net[2](net[1](net[0](x)))
                out = net[3](hidden) if micro else hidden  # the last layer gets no gradient in micro-batch 0
                (out.float() ** 2).mean().backward()
                masters.gather_grads()
                assert all(p.grad is None for p in params)
            grads = [m.grad.clone() for m in masters.master]
            optimizer.step()
            masters.copy_to_model()
        runs.append((grads, [m.detach().clone() for m in masters.master], [p.detach().clone() for p in params]))
    (loop_grads, loop_masters, loop_params), (flat_grads, flat_masters, flat_params) = runs
    for a, b in zip(loop_grads + loop_masters + loop_params, flat_grads + flat_masters + flat_params, strict=True):
        assert a.dtype == b.dtype and torch.equal(
            a.view(torch.int16 if a.dtype == torch.bfloat16 else torch.int32),
            b.view(torch.int16 if b.dtype == torch.bfloat16 else torch.int32),
        )


def test_an_unused_tensor_keeps_no_gradient_and_is_not_stepped():
    used, unused = (torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16)) for _ in range(2))
    masters = MasterWeights([used, unused])
    (used.float() * 2).sum().backward()
    masters.gather_grads()
    assert masters.master[1].grad is None and torch.equal(masters.master[0].grad, torch.full((3,), 2.0))
