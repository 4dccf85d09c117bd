"""The batch-field catalogue and the output check the runtime applies to every stage's result."""

from __future__ import annotations

import torch

from rlflow.batch import Batch
from rlflow.stages import STAGE_KINDS
from rlflow.stages.fields import FIELDS, OUTSIDE_BATCH, output_problems

R = 8  # data.max_response_length


def rollout(rows: int = 4, width: int = R, ids=torch.long) -> Batch:
    return Batch(
        {"responses": torch.zeros(rows, width, dtype=ids), "response_mask": torch.ones(rows, width, dtype=torch.long)},
        {"response_text": [""] * rows},
    )


GENERATE = ("responses", "response_mask", "response_text")


def test_every_field_a_builtin_stage_writes_is_catalogued_or_outside_the_batch():
    written = {f for name in STAGE_KINDS.names() for f in STAGE_KINDS.get(name).writes_fields}
    assert written - FIELDS.keys() - OUTSIDE_BATCH == set()


def test_a_well_formed_output_passes_with_or_without_a_row_count():
    assert output_problems(rollout(), GENERATE, 4, R) == []
    assert output_problems(rollout(rows=12), GENERATE, None, R) == []  # a stage that changes rows


def test_a_response_one_column_short_names_field_expected_and_actual():
    assert output_problems(rollout(width=R - 1), ("responses",), None, R) == [
        "field 'responses': expected [rows, 8] integer, got [4, 7] int64"
    ]


def test_wrong_rows_wrong_dtype_and_missing_fields_are_each_reported():
    out = Batch({"old_log_probs": torch.zeros(3, R, dtype=torch.long), "ref_log_prob": torch.zeros(3, R)})
    problems = output_problems(out, ("old_log_probs", "entropys", "ref_log_prob"), 4, R)
    assert problems == [
        "field 'old_log_probs': expected [4, 8] floating, got [3, 8] int64",
        "field 'entropys' is missing (it returned ['old_log_probs', 'ref_log_prob'])",
        "field 'ref_log_prob': expected [4, 8] floating, got [3, 8] float32",
    ]


def test_token_ids_as_floats_or_masks_as_bools_are_refused():
    assert output_problems(rollout(ids=torch.float32), ("responses",), 4, R) == [
        "field 'responses': expected [4, 8] integer, got [4, 8] float32"
    ]
    out = Batch({"response_mask": torch.ones(4, R, dtype=torch.bool)})
    assert output_problems(out, ("response_mask",), 4, R) == [
        "field 'response_mask': expected [4, 8] integer, got [4, 8] bool"
    ]


def test_any_integer_or_floating_width_passes():
    out = Batch({"responses": torch.zeros(2, R, dtype=torch.int32), "scores": torch.zeros(2, dtype=torch.bfloat16)})
    assert output_problems(out, ("responses", "scores"), 2, R) == []


def test_per_row_lists_must_be_lists_and_unknown_fields_need_only_be_present():
    out = Batch({"response_text": torch.zeros(4)}, {"my_plugin_field": [1, 2, 3, 4]})
    assert output_problems(out, ("response_text", "my_plugin_field"), 4, R) == [
        "field 'response_text': expected a list of 4 rows, got [4] float32"
    ]
    assert output_problems(Batch(), ("my_plugin_field",), 0, R) == [
        "field 'my_plugin_field' is missing (it returned no fields)"
    ]


def test_state_checkpoint_and_metric_fields_are_not_batch_data():
    assert (
        output_problems(Batch(metrics={"val-core/x": 1.0}), ("actor_weights", "checkpoint", "val_metrics"), 4, R) == []
    )
