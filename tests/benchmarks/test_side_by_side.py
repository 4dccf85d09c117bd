"""The side-by-side benchmark's reading of a run: minutes per step from the trace, the table, the doc block."""

from __future__ import annotations

import json

import pytest

from benchmarks import side_by_side


def test_step_minutes_run_from_the_first_stage_to_each_steps_last_record(tmp_path):
    records = [
        {"step": 0, "stage": "sync_weights", "start": 100.0, "end": 101.0},
        {"step": 0, "stage": "validate", "start": 101.0, "end": 106.0},
        {"step": 1, "stage": "generate", "start": 106.0, "end": 130.0},
        {"step": 1, "stage": "validate", "start": 130.0, "end": 160.0},
    ]
    (tmp_path / "trace.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert side_by_side.step_minutes(tmp_path) == {0: pytest.approx(0.1), 1: pytest.approx(1.0)}


def test_the_table_and_the_doc_block(tmp_path):
    run = {
        "algorithm": "dapo",
        "pipeline": "pipelines/ranking_dapo.yaml",
        "before": 0.32,
        "after": 0.61,
        "delta": 0.29,
        "steps": 40,
        "gen_batches": 57.0,
    }
    text = side_by_side.table([run], 10.0)
    assert text.splitlines()[0].startswith("| recipe | pipeline | val acc before | after 10 min |")
    assert text.splitlines()[2] == "| dapo | `pipelines/ranking_dapo.yaml` | 0.32 | 0.61 | +29 | 40 | 57 |"
    doc = tmp_path / "benchmarks.md"
    doc.write_text("head\n<!-- algorithms:start -->\nold\n<!-- algorithms:end -->\ntail\n")
    side_by_side.write_doc(text, doc)
    assert doc.read_text() == f"head\n<!-- algorithms:start -->\n{text}\n<!-- algorithms:end -->\ntail\n"
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        side_by_side.write_doc(text, bare)


def test_every_recipe_is_a_shipped_pipeline():
    for name in side_by_side.ALGORITHMS:
        assert (side_by_side.ROOT / side_by_side.pipeline_of(name)).is_file()
