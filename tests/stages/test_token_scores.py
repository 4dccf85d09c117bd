"""A row's score goes on its last written token, also when a multi-turn mask has holes."""

from __future__ import annotations

import numpy as np

from rlflow.stages.token_scores import place_on_last_token, response_lengths


def test_score_on_the_last_model_token():
    mask = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [1, 0, 1, 0]])  # single-turn, empty, two transcripts
    out = place_on_last_token([1.0, 2.0, 3.0, 4.0], mask)
    assert out.tolist() == [[0, 1, 0, 0], [2, 0, 0, 0], [0, 0, 0, 3], [0, 0, 4, 0]]


def test_lengths_run_through_the_last_model_token_as_verls_attention_mask():
    import torch

    from rlflow.batch import response_span

    mask = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 1], [1, 0, 1, 0]])
    assert response_lengths(mask).tolist() == [2, 0, 4, 3]
    assert response_lengths(mask).tolist() == response_span(torch.from_numpy(mask)).sum(-1).tolist()
