"""Every estimator rlflow accepts equals verl's trainer on the same batch.

The reference is verl's own ``compute_advantage`` (``verl/trainer/ppo/ray_trainer.py``): its
source is read from the installed verl and run as it is, on a ``DataProto``, because importing
that module pulls in verl's whole trainer (and packages a CPU install lacks). So the test covers
verl's dispatch (which arguments each estimator gets), not only the registered functions.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch
from stage_helpers import make_pipeline

from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.schemas.algorithms import ADV_ESTIMATORS, NEEDS
from rlflow.stages.base import StageContext
from rlflow.stages.grpo_advantage import GrpoAdvantage, verl_algo_config

ACCEPTED = [name for name in ADV_ESTIMATORS if name not in NEEDS]


def verl_compute_advantage():
    """verl's ``compute_advantage`` compiled from its source, with the names it uses."""
    from verl.protocol import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos

    spec = importlib.util.find_spec("verl")
    path = Path(next(iter(spec.submodule_search_locations))) / "trainer" / "ppo" / "ray_trainer.py"
    tree = ast.parse(path.read_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "compute_advantage")
    namespace = {
        "DataProto": DataProto,
        "AdvantageEstimator": core_algos.AdvantageEstimator,
        "core_algos": core_algos,
        "AlgoConfig": AlgoConfig,
        "Optional": Optional,
        "compute_response_mask": None,  # the batch always has response_mask
    }
    exec(compile(ast.Module([func], type_ignores=[]), str(path), "exec"), namespace)
    return namespace["compute_advantage"]


def random_batch(seed: int, singleton: bool = True) -> Batch:
    """Groups of 4, 4, 3 (and 1) samples with random scores on the last token and random extra rewards."""
    gen = torch.Generator().manual_seed(seed)
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 3 + ["d"] * singleton
    rows, width, prompt = len(uids), 7, 3
    lengths = torch.randint(1, width + 1, (rows,), generator=gen)
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    scores = torch.randint(0, 3, (rows,), generator=gen).float() / 2
    token_scores = torch.zeros(rows, width)
    token_scores[torch.arange(rows), lengths - 1] = scores
    extras = [{"acc": float(s > 0.4), "fmt": float(torch.rand((), generator=gen) > 0.5)} for s in scores]
    return Batch(
        {
            "token_level_scores": token_scores,
            "response_mask": mask,
            "prompts": torch.randint(0, 50, (rows, prompt), generator=gen),
            "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
            "scores": scores,
            "values": torch.randn(rows, width, generator=gen) * mask,  # gae's critic values
        },
        {"uid": uids, "reward_extra": extras},
    )


def run(batch: Batch, **algorithm) -> Batch:
    ctx = StageContext(
        pipeline=make_pipeline(algorithm=algorithm),
        config=GrpoAdvantage.parse_config({}),
        stage_name="advantage",
        step=1,
    )
    return GrpoAdvantage().run(batch, ctx)


def verl_side(batch: Batch, pipeline_algorithm) -> tuple[torch.Tensor, torch.Tensor]:
    from verl.protocol import DataProto

    tensors = {
        "token_level_rewards": batch["token_level_scores"].clone(),
        "response_mask": batch["response_mask"].clone(),
        "prompts": batch["prompts"],
        "attention_mask": torch.cat([batch["prompt_mask"], batch["response_mask"]], dim=-1),
        "values": batch["values"].clone(),
    }
    non_tensors = {"uid": np.array(batch["uid"], dtype=object)}
    for key in pipeline_algorithm.gdpo_reward_keys or ():
        non_tensors[key] = np.array([e[key] for e in batch["reward_extra"]], dtype=np.float32)
    data = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
    out = verl_compute_advantage()(
        data,
        adv_estimator=pipeline_algorithm.adv_estimator,
        gamma=pipeline_algorithm.gamma,
        lam=pipeline_algorithm.lam,
        norm_adv_by_std_in_grpo=pipeline_algorithm.norm_adv_by_std_in_grpo,
        config=verl_algo_config(pipeline_algorithm),
    )
    return out.batch["advantages"], out.batch["returns"]


CASES = [
    *[(name, {}) for name in ACCEPTED if name != "gdpo"],
    ("grpo", {"norm_adv_by_std_in_grpo": False}),  # Dr.GRPO
    ("grpo_passk", {"norm_adv_by_std_in_grpo": False}),
    ("reinforce_plus_plus", {"gamma": 0.9}),
    ("gae", {"gamma": 0.9, "lam": 0.95}),
    ("gdpo", {"gdpo_reward_keys": ["acc", "fmt"]}),
    ("gdpo", {"gdpo_reward_keys": ["acc", "fmt"], "gdpo_reward_weights": [1.0, 0.5]}),
]


@pytest.mark.parametrize(("estimator", "knobs"), CASES, ids=[f"{e}-{'-'.join(k) or 'defaults'}" for e, k in CASES])
@pytest.mark.parametrize("seed", [0, 1])
def test_estimator_equals_verls_trainer(estimator, knobs, seed):
    singleton = estimator != "grpo_passk"  # pass@k needs two samples a group (validate checks n >= 2)
    batch = random_batch(seed, singleton)
    algorithm = {"adv_estimator": estimator, **knobs}
    out = run(random_batch(seed, singleton), **algorithm)
    adv, ret = verl_side(batch, make_pipeline(algorithm=algorithm).algorithm)
    assert torch.equal(out["advantages"], adv)
    assert torch.equal(out["returns"], ret)
    assert out["advantages"].abs().sum() > 0  # the batch exercises the estimator


def test_estimators_differ_from_each_other():
    """A guard that the stage really switches estimator (two equal outputs would hide a dispatch bug)."""
    outs = {name: run(random_batch(0), adv_estimator=name)["advantages"] for name in ("grpo", "rloo", "opo", "gpg")}
    assert len({tuple(v.flatten().tolist()) for v in outs.values()}) == len(outs)


def test_gdpo_names_a_key_the_reward_did_not_return():
    with pytest.raises(StageError, match="gdpo_reward_keys names 'missing'.*returned \\['acc', 'fmt'\\]"):
        run(random_batch(0), adv_estimator="gdpo", gdpo_reward_keys=["missing"])
