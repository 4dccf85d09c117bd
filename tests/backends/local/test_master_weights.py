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
