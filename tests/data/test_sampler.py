"""StepSampler: seeded epoch permutations, drop_last, and exact resume."""

from __future__ import annotations

import pytest

from rlflow.data import StepSampler
from rlflow.errors import DataError, ResumeError


def draw(sampler: StepSampler, steps: int) -> list[list[int]]:
    return [sampler.next_indices() for _ in range(steps)]


def test_each_epoch_is_a_permutation_without_the_remainder():
    sampler = StepSampler(dataset_len=10, batch_size=3, seed=5, shuffle=True)
    assert sampler.steps_per_epoch == 3
    for epoch in range(3):
        batches = draw(sampler, 3)
        assert sampler.epoch == epoch
        flat = [i for b in batches for i in b]
        assert all(len(b) == 3 for b in batches) and len(set(flat)) == 9 and set(flat) <= set(range(10))


def test_seeded_and_deterministic():
    a, b, c = (StepSampler(50, 8, seed, True) for seed in (1, 1, 2))
    run_a, run_b, run_c = draw(a, 20), draw(b, 20), draw(c, 20)
    assert run_a == run_b and run_a != run_c
    assert run_a[:6] != run_a[6:12], "every epoch is shuffled afresh"


def test_no_shuffle_reads_in_order():
    sampler = StepSampler(7, 3, seed=0, shuffle=False)
    assert draw(sampler, 3) == [[0, 1, 2], [3, 4, 5], [0, 1, 2]]


@pytest.mark.parametrize("cut", [0, 1, 6, 7, 13])
def test_resume_continues_exactly(cut):
    straight = StepSampler(50, 8, seed=3, shuffle=True)
    expected = draw(straight, 20)
    first = StepSampler(50, 8, seed=3, shuffle=True)
    draw(first, cut)
    resumed = StepSampler(50, 8, seed=3, shuffle=True)
    resumed.load_state_dict(dict(first.state_dict()))
    assert resumed.epoch == first.epoch
    assert draw(resumed, 20 - cut) == expected[cut:]


def test_resume_with_other_data_is_refused():
    saved = StepSampler(50, 8, seed=3).state_dict()
    with pytest.raises(ResumeError, match="dataset_len: saved 50, now 60"):
        StepSampler(60, 8, seed=3).load_state_dict(saved)


def test_dataset_smaller_than_a_batch_is_an_error():
    with pytest.raises(DataError, match="fewer than trainer.train_batch_size=16"):
        StepSampler(10, 16, seed=0)


def test_take_draws_any_count_in_the_batches_order_and_resumes_at_its_offset():
    batches = draw(StepSampler(10, 3, seed=5, shuffle=True), 6)  # two epochs of three batches
    stream = [i for b in batches for i in b]
    sampler = StepSampler(10, 3, seed=5, shuffle=True)
    first, second = sampler.take(7), sampler.take(4)  # the second runs past the epoch's 9 prompts
    assert first + second == stream[:11] and sampler.epoch == 1
    state = sampler.state_dict()
    assert (state["epoch"], state["position"], state["offset"]) == (1, 0, 2)
    resumed = StepSampler(10, 3, seed=5, shuffle=True)
    resumed.load_state_dict(state)
    assert resumed.take(7) == sampler.take(7) == stream[11:18]


def test_a_state_without_an_offset_resumes_at_its_batch():
    state = StepSampler(50, 8, seed=3).state_dict()
    del state["offset"]
    state["position"] = 2
    resumed = StepSampler(50, 8, seed=3)
    resumed.load_state_dict(state)
    assert resumed.next_indices() == draw(StepSampler(50, 8, seed=3), 3)[2]
