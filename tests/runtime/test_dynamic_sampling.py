"""DAPO's dynamic sampling: the batch fills with varying groups, the generation bound holds, metrics, exact resume.

The layer's own tests run ``fill_batch`` over a scripted stage runner (each prompt's samples score
alike or not as the test decides, the prompts' widths differ per batch), and verl's own V1 replay
buffer on the same script (``verl_replay_buffer``): both draw the same prompts round by round. The
end-to-end ones run the shipped ``ranking_dapo.yaml`` for two steps over the in-process executor
and resume it.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from runtime_helpers import NOISY, REPO, train_in_process
from verl_replay_buffer import Rollout, load_replay_buffer, sampled_prompts

from rlflow.batch import Batch
from rlflow.check import load_pipeline
from rlflow.data.sampler import StepSampler
from rlflow.errors import StageError
from rlflow.plan.compile import compile_plan
from rlflow.runtime.dynamic_sampling import PREFIX, Refill, fill_batch, first_groups, varying_groups

N = 3


class Prompts:
    """A training set whose prompt ``i`` is ``i + 1`` tokens long (so generation batches differ in width)."""

    def to_batch(self, indices: list[int], pad_id: int, step: int = 0) -> Batch:
        width = max(i + 1 for i in indices)
        prompts = torch.full((len(indices), width), pad_id)
        mask = torch.zeros((len(indices), width), dtype=torch.long)
        for r, i in enumerate(indices):
            prompts[r, width - i - 1 :] = i
            mask[r, width - i - 1 :] = 1
        return Batch(
            {"prompts": prompts, "prompt_mask": mask},
            {"uid": [f"{step}-{r}-{i}" for r, i in enumerate(indices)], "index": list(indices)},
        )


class ScriptedExecutor:
    """Generates n samples a prompt; the reward gives prompt ``i``'s samples the same score when ``i`` is
    in ``uniform``, else 0, 1, 0...; records every call."""

    def __init__(self, uniform: set[int]) -> None:
        self.uniform = uniform
        self.calls: list[tuple[str, list[int]]] = []

    def run_stage(self, stage, batch: Batch, step: int) -> Batch:
        self.calls.append((stage.name, sorted(set(batch["index"]))))
        if stage.name == "generate":
            rows = batch.repeat_interleave(N)
            rows["responses"] = torch.ones(len(rows), 4, dtype=torch.long)
            rows["response_mask"] = torch.ones(len(rows), 4, dtype=torch.long)
            return rows
        scores = [1.0 if i in self.uniform else float(k % 2) for k, i in enumerate(batch["index"])]
        batch["scores"] = torch.tensor(scores)
        batch["reward_extra"] = [{"acc": s} for s in scores]
        batch.metrics["reward/acc"] = sum(scores) / len(scores)
        return batch


def setup(uniform: set[int], size: int = 4, data_len: int = 40, **groups):
    spec = SimpleNamespace(
        algorithm=SimpleNamespace(
            filter_groups=SimpleNamespace(
                **{"metric": "acc", "max_num_gen_batches": 0, "max_inflight_gen_batches": 1, **groups}
            )
        ),
        trainer=SimpleNamespace(train_batch_size=size),
    )
    stages = {
        name: SimpleNamespace(name=name, verl_timer=timer)
        for name, timer in (("generate", "gen"), ("reward", "reward"))
    }
    plan = SimpleNamespace(refill=("generate", "reward"), stage=stages.__getitem__)
    data = SimpleNamespace(
        sampler=StepSampler(data_len, size, seed=1, shuffle=False),
        train=Prompts(),
        tokenizer=SimpleNamespace(pad_token_id=0),
    )
    return ScriptedExecutor(uniform), plan, data, spec


def fill(executor, plan, data, spec, step: int) -> Batch:
    """``fill_batch`` as the sync mode calls it: the refill stages in turn, prompts from the sampler."""

    def run(batch: Batch) -> Batch:
        for name in plan.refill:
            batch = executor.run_stage(plan.stage(name), batch, step)
        return batch

    def draw(count: int) -> Batch:
        return data.train.to_batch(data.sampler.take(count), data.tokenizer.pad_token_id, step=step)

    size = spec.trainer.train_batch_size
    rules = Refill(spec.algorithm.filter_groups, size, data.sampler.steps_per_epoch * size, data.tokenizer.pad_token_id)
    return fill_batch(run, draw, rules, step)


def test_the_batch_fills_with_varying_groups_in_order():
    executor, plan, data, spec = setup(uniform={0, 2, 3, 5, 6})  # batch 1 keeps 1, batch 2 keeps 2 of 4
    batch = fill(executor, plan, data, spec, step=7)
    indices = list(dict.fromkeys(batch["index"]))
    assert indices == [1, 4, 7, 8]  # the first four groups that vary, in the order they were generated
    assert len(batch) == 4 * N and batch["prompts"].shape[-1] == 12  # prompts left-padded to the widest (index 11)
    assert batch["prompt_mask"].sum(-1).tolist() == [i + 1 for i in batch["index"]]
    assert len(set(batch["uid"])) == 4
    # rounds: 1 batch (keeps 1), then 2 x 3 missing / 4 -> 2 batches wanted, capped by max_inflight 1 (keeps 2),
    # then 1 more (prompts 8..11 keep 4: one needed, three surplus)
    assert [c for c in executor.calls if c[0] == "generate"] == [
        ("generate", [0, 1, 2, 3]),
        ("generate", [4, 5, 6, 7]),
        ("generate", [8, 9, 10, 11]),
    ]
    assert batch.metrics == {
        "reward/acc": pytest.approx(batch.metrics["reward/acc"]),
        f"{PREFIX}/evicted_samples": 5.0,
        f"{PREFIX}/discarded_surplus_samples": 3.0,
        f"{PREFIX}/gen_rounds": 3.0,
        "train/num_gen_batches": 3.0,
    }
    assert data.sampler.state_dict()["position"] == 3  # every prompt drawn is consumed


def test_inflight_batches_generate_together():
    executor, plan, data, spec = setup(uniform={0, 1, 2}, max_inflight_gen_batches=3)  # 3 of 4 dropped
    batch = fill(executor, plan, data, spec, step=1)
    generated = [c[1] for c in executor.calls if c[0] == "generate"]
    assert generated == [[0, 1, 2, 3], list(range(4, 10))]  # 2 x 3 dropped = 6 prompts at once, within 3 x 4
    assert batch.metrics["train/num_gen_batches"] == 2.5 and batch.metrics[f"{PREFIX}/gen_rounds"] == 2.0
    assert data.sampler.state_dict()["offset"] == 2  # 10 prompts drawn: two batches of 4 and 2 more


@pytest.mark.parametrize(
    ("uniform", "inflight"),
    [
        (set(range(7)), 2),  # the example: 7 of 8 groups dropped draw 14 prompts (not two batches, 16)
        ({0, 2, 3, 5, 6, 9, 10, 11, 12, 13}, 1),  # the credit left over carries to the next round
        ({i for i in range(40) if i % 3 != 2}, 3),
    ],
)
def test_refills_draw_what_verls_replay_buffer_draws(monkeypatch, uniform, inflight):
    size = 8
    executor, plan, data, spec = setup(uniform, size=size, data_len=200, max_inflight_gen_batches=inflight)
    batch = fill(executor, plan, data, spec, step=1)
    ours = [len(c[1]) for c in executor.calls if c[0] == "generate"]

    replay_buffer, store = load_replay_buffer(monkeypatch)
    rollout = Rollout(store, N, lambda i, sample: 1.0 if i in uniform else float(sample % 2), range(200))
    buffer = replay_buffer.ReplayBuffer(
        "sync", {}, None, "drop", {}, poll_interval=0.0, refill_fn=rollout.submit, filter_groups_metric="acc",
        train_batch_size=size, gen_batch_size=1, max_inflight_gen_batches=inflight,
    )  # fmt: skip
    rollout.submit(size)  # verl's prepare_step sends one batch
    sampled, metrics = buffer.sample(1, "train", size)
    assert ours == rollout.sent, "the same prompts drawn, round by round"
    assert batch.metrics[f"{PREFIX}/evicted_samples"] == metrics[f"{PREFIX}/evicted_samples"]
    assert batch.metrics[f"{PREFIX}/discarded_surplus_samples"] == metrics[f"{PREFIX}/discarded_surplus_samples"]
    assert len(set(batch["uid"])) == len(sampled_prompts(sampled)) == size
    assert batch.metrics["train/num_gen_batches"] == sum(ours) / size


def test_reward_means_cover_the_rows_the_step_trains_on():
    executor, plan, data, spec = setup(uniform={0, 2, 3, 5, 6})  # dropped groups score 1 on every sample
    batch = fill(executor, plan, data, spec, step=7)
    trained = batch["scores"].tolist()
    assert batch.metrics["reward/acc"] == pytest.approx(sum(trained) / len(trained))  # critic/score/mean's rows
    assert batch.metrics["reward/acc"] == 0.5, "the kept groups alternate 0 and 1; the dropped ones' 1s are not in it"


def test_a_step_that_cannot_fill_stops_at_max_num_gen_batches():
    executor, plan, data, spec = setup(uniform=set(range(40)), max_num_gen_batches=3)
    with pytest.raises(StageError, match=r"step 2: dynamic sampling generated 3 batches \(12 prompts\) and only 0 of"):
        fill(executor, plan, data, spec, step=2)
    assert len([c for c in executor.calls if c[0] == "generate"]) == 3


def test_without_a_bound_one_pass_over_the_data_is_the_limit():
    executor, plan, data, spec = setup(uniform=set(range(40)), data_len=12)
    with pytest.raises(StageError, match=r"within one pass over the training set"):
        fill(executor, plan, data, spec, step=1)
    assert len([c for c in executor.calls if c[0] == "generate"]) == 3  # 12 prompts / 4


def test_a_constant_reward_under_a_huge_bound_stops_after_one_pass(monkeypatch, caplog):
    """The issue's example: max_num_gen_batches 1e9 and a reward that never varies. The step says on the console
    what it is doing while it fills, and stops after a whole pass over the training set kept no group."""
    import rlflow.runtime.dynamic_sampling as dynamic_sampling

    monkeypatch.setattr(dynamic_sampling, "PROGRESS_EVERY_S", 0.0)
    executor, plan, data, spec = setup(uniform=set(range(40)), data_len=40, max_num_gen_batches=10**9)
    with caplog.at_level("WARNING", logger="rlflow.runtime"), pytest.raises(StageError) as caught:
        fill(executor, plan, data, spec, step=3)
    assert str(caught.value).startswith(
        "step 3: dynamic sampling drew 40 prompts, a whole pass over the training set, without one group whose "
        "'acc' varies (0 of train_batch_size 4 kept, 40 prompts drawn in all)"
    )
    assert sum(len(c[1]) for c in executor.calls if c[0] == "generate") == 40  # one pass, not 4e9 prompts
    progress = [r.getMessage() for r in caplog.records if "still filling" in r.getMessage()]
    assert progress[0] == (
        "step 3: dynamic sampling is still filling the batch: 1 rounds, 4 prompts drawn, 0 of train_batch_size 4 "
        "groups kept (a group whose 'acc' is the same for every sample is dropped); it draws at most 4000000000 "
        "prompts (max_num_gen_batches=1000000000)"
    )


def test_a_step_that_keeps_groups_now_and_then_is_not_cut_short():
    """The pass is counted from the last group kept: a hard task that keeps one group a pass still fills."""
    executor, plan, data, spec = setup(uniform=set(range(40)) - {5}, data_len=40, max_num_gen_batches=50)  # 1 a pass
    batch = fill(executor, plan, data, spec, step=1)
    assert len(set(batch["uid"])) == 4 and batch.metrics["train/num_gen_batches"] > 10


def test_a_metric_the_reward_did_not_return_is_named():
    batch = Batch({"scores": torch.ones(2)}, {"uid": ["a", "a"], "reward_extra": [{"acc": 1.0}, {"acc": 1.0}]})
    with pytest.raises(
        StageError, match=r"metric 'score_x' is not among what the reward returned for row 0 \(\['acc'\]\)"
    ):
        varying_groups(batch, "score_x", 3)
    assert varying_groups(batch, "reward", 3) == ([], 1)


def test_groups_of_one_are_kept_and_surplus_is_counted():
    batch = Batch({"scores": torch.tensor([1.0, 1.0, 0.0, 2.0, 2.0])}, {"uid": ["a", "a", "b", "c", "c"]})
    assert varying_groups(batch, "reward", 1) == ([2], 2)
    kept, surplus = first_groups(batch, 2)
    assert kept["uid"] == ["a", "a", "b"] and surplus == 1


# ---- end to end: the shipped DAPO recipe over the in-process executor -------------------------------------

SETS = [
    "trainer.train_batch_size=4",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=8",
    "algorithm.n=4",
    "trainer.total_steps=2",
    "trainer.save_freq=1",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # the runs here are bit-compared


def run_dapo(run_dir: Path, resume: Path | None = None) -> list[dict]:
    assert compile_plan(load_pipeline(REPO / "pipelines" / "ranking_dapo.yaml", SETS).spec).refill == (
        "generate",
        "reward",
    )
    return train_in_process(REPO / "pipelines" / "ranking_dapo.yaml", SETS, run_dir, resume)


def test_the_dapo_recipe_trains_two_steps_and_resumes_exactly(tmp_path):
    metrics = run_dapo(tmp_path / "a")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert m["train/num_gen_batches"] >= 1 and m[f"{PREFIX}/gen_rounds"] >= 1
        assert {f"{PREFIX}/evicted_samples", f"{PREFIX}/discarded_surplus_samples", "actor/pg_loss"} <= set(m)
        assert "reward/overlong_reward" in m  # the recipe's overlong buffer shapes the reward
        assert m["critic/advantages/max"] > 0  # every group kept varies: every group has an advantage
        assert {"timing_s/gen", "timing_s/reward"} <= set(m)  # every refill round's stages are timed
    trace = [json.loads(line) for line in (tmp_path / "a" / "trace.jsonl").read_text().splitlines()]
    rounds = int(metrics[0][f"{PREFIX}/gen_rounds"])
    assert [r["stage"] for r in trace if r["step"] == 1].count("generate") == rounds

    sampler = json.loads((tmp_path / "a" / "checkpoints" / "step_1" / "trainer_state.json").read_text())["sampler"]
    drawn = sampler["position"] + sampler["offset"] / sampler["batch_size"]
    assert drawn == metrics[0]["train/num_gen_batches"]  # every prompt drawn is counted

    resumed = run_dapo(tmp_path / "b", resume=tmp_path / "a" / "checkpoints" / "step_1")
    assert [m["step"] for m in resumed] == [2]
    same = {k for k in metrics[1] if not k.startswith(NOISY)}
    assert {k: resumed[0][k] for k in same} == {k: metrics[1][k] for k in same}
