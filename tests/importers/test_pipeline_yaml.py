"""A pipeline written as YAML: the format's field order, one line per stage and pool, rlflow's reader takes it."""

from __future__ import annotations

from rlflow.importers.pipeline_yaml import no_template, render_pipeline
from rlflow.schemas.safe_yaml import parse_yaml

PIPELINE = {
    "stages": [{"name": "generate", "uses": "generate", "on": "pool", "with": {"temperature": 0.7}}],
    "resources": {"pool": {"type": "local", "device": "gpu"}},
    "trainer": {"optim": {"lr_scheduler": "cosine", "lr": 1e-6}, "train_batch_size": 8},
    "data": {"train": "a: b.parquet", "format": "verl"},
    "name": "p",
}


def test_sections_follow_the_formats_field_order_and_stages_take_one_line():
    text = render_pipeline(PIPELINE)
    assert text == (
        "name: p\n"
        "data:\n"
        "  format: verl\n"
        "  train: 'a: b.parquet'\n"
        "trainer:\n"
        "  train_batch_size: 8\n"
        "  optim:\n"
        "    lr: 1.0e-06\n"
        "    lr_scheduler: cosine\n"
        "resources:\n"
        "  pool: {type: local, device: gpu}\n"
        "stages:\n"
        "  - {name: generate, uses: generate, on: pool, with: {temperature: 0.7}}\n"
    )


def test_rlflows_reader_reads_back_what_was_written():
    data, _, problems = parse_yaml(render_pipeline(PIPELINE), "p.yaml")
    assert problems == [] and data == PIPELINE


def test_comment_text_cannot_start_a_template():
    assert no_template("value {{ x }} {% if %} {# c #}") == "value { { x }} { % if %} { # c #}"
