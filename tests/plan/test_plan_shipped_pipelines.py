"""Every shipped pipeline (pipelines/*.yaml, whoever adds one) loads, compiles and renders."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from plan_helpers import REPO

from rlflow.check import load_pipeline
from rlflow.plan.compile import compile_plan
from rlflow.plan.dataflow import VERL_INDEX
from rlflow.plan.graphviz import render_graphviz
from rlflow.plan.model import DATA_SOURCE
from rlflow.plan.render_dot import render_dot
from rlflow.plan.render_json import render_json
from rlflow.plan.render_mermaid import render_mermaid
from rlflow.plan.render_text import render_text
from rlflow.schemas.project import load_project_config

PIPELINES = sorted((REPO / "pipelines").glob("*.yaml"))


def test_pipelines_are_shipped():
    assert PIPELINES, "pipelines/ holds no pipeline"


@pytest.fixture(scope="module")
def project():
    return load_project_config(REPO)


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.name)
def test_shipped_pipeline_compiles_in_verl_order(path, project, tmp_path):
    plan = compile_plan(load_pipeline(path, project=project).spec)
    timed = [VERL_INDEX[s.verl_timer] for s in plan.step if s.verl_timer in VERL_INDEX]
    assert timed == sorted(timed), f"{path.name}: steps out of verl's order: {plan.stage_names()}"
    assert plan.step[0].verl_timer == "gen" and plan.loop_edges(), "a step starts with generation and loops"
    assert [s.kind for s in plan.init][:2] == ["load_checkpoint", "sync_weights"]
    names = set(plan.stage_names())
    for edge in plan.edges:
        assert edge.dst in names and (edge.src in names or edge.src == DATA_SOURCE)
    for stage in (*plan.step, *plan.init):
        assert stage.resource in plan.resources and stage.name in plan.resources[stage.resource].stages
    assert json.loads(render_json(plan))["stages"][0]["name"] == plan.step[0].name
    assert all(name in render_text(plan) and name in render_mermaid(plan) for name in names)
    if shutil.which("dot"):
        svg = render_graphviz(render_dot(plan), tmp_path / "step.svg")
        texts = "".join(ET.parse(svg).getroot().itertext())
        assert all(name in texts for name in names)
