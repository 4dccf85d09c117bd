"""Renderers: golden text / Mermaid / DOT for fixed pipelines, JSON shape, and a real ``dot`` drawing.

Golden files live in tests/plan/golden/. After an intended change to a renderer, regenerate
them with ``RLFLOW_UPDATE_GOLDEN=1 pytest tests/plan/test_plan_render.py`` and review the diff.
"""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from plan_helpers import REPO, spec_from_yaml

from rlflow.check import load_pipeline
from rlflow.errors import RlflowError
from rlflow.plan.compile import compile_plan
from rlflow.plan.graphviz import GraphvizFailed, GraphvizMissing, render_graphviz
from rlflow.plan.render_dot import quote, render_dot
from rlflow.plan.render_json import plan_to_dict, render_json
from rlflow.plan.render_mermaid import render_mermaid
from rlflow.plan.render_text import render_text
from rlflow.schemas.project import load_project_config

GOLDEN = Path(__file__).parent / "golden"
RENDERERS = {"txt": render_text, "mmd": render_mermaid, "dot": render_dot}
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


PPO = REPO / "pipelines" / "ranking_ppo.yaml"  # the shipped PPO pipeline: its critic on a pool of its own


def golden_plan(name: str):
    if name == "ranking_ppo":
        return compile_plan(load_pipeline(PPO, project=load_project_config(REPO), check_paths=False).spec)
    return compile_plan(spec_from_yaml((GOLDEN / f"{name}.yaml").read_text()))


@pytest.mark.parametrize(
    "name, suffix",
    [
        *((name, suffix) for name in ("local", "remote", "async", "ppo_colocated") for suffix in sorted(RENDERERS)),
        ("ranking_ppo", "txt"),
        ("ranking_ppo", "dot"),
    ],
)
def test_golden(name, suffix):
    rendered = RENDERERS[suffix](golden_plan(name))
    path = GOLDEN / f"{name}.{suffix}"
    if os.environ.get("RLFLOW_UPDATE_GOLDEN"):
        path.write_text(rendered)
    assert rendered == path.read_text(), f"{path.name} changed; see the module docstring to regenerate it"


def test_text_shows_order_placement_loop_and_colocation():
    text = render_text(golden_plan("local"))
    step = text.split("step (")[1]
    order = ["generate", "reward", "keep_varied", "balance_batch", "old_log_prob", "ref_log_prob", "advantage",
             "update_actor", "save_checkpoint", "sync_weights", "validate"]  # fmt: skip
    positions = [step.index(f"{i}.  {name}") for i, name in enumerate(order, 1)]
    assert positions == sorted(positions)
    assert "loop: sync_weights --rollout_weights--> generate of the next step" in text
    assert "local, device gpu, 4 workers on 2 nodes x node bundle {CPU: 8, GPU: 2}, STRICT_SPREAD" in text
    assert "colocated: generate, old_log_prob, ref_log_prob, update_actor, save_checkpoint, sync_weights" in text


def _resource_lines(text: str) -> dict[str, list[str]]:
    """The resources section of a text rendering: pool name -> the lines under it."""
    pools: dict[str, list[str]] = {}
    for line in text.split("\nresources\n")[1].splitlines():
        if not line.startswith("    "):
            pools[line.split()[0]] = []
        else:
            pools[list(pools)[-1]].append(line.strip())
    return pools


def test_each_local_pool_shows_the_models_it_loads():
    own = _resource_lines(render_text(golden_plan("ranking_ppo")))
    assert own["actor_pool"][0] == "models: model" and own["critic_pool"][0] == "models: critic"
    assert own["critic_pool"][1:] == [
        "checkpoint: save_checkpoint and load_checkpoint run here too, for the checkpoint's critic/",
        "colocated: values, update_critic",
    ]
    assert not any(line.startswith(("models:", "checkpoint:")) for line in own["reward_pool"] + own["driver"])
    colocated = _resource_lines(render_text(golden_plan("ppo_colocated")))
    assert colocated["actor"][0] == "models: model, critic" and len(colocated["actor"]) == 2
    assert "values, update_critic, update_actor" in colocated["actor"][1]
    assert _resource_lines(render_text(golden_plan("remote")))["engine"][0] != "models: model"  # its backend's


def test_the_critic_stages_appear_with_their_pool_in_every_rendering():
    plan = golden_plan("ranking_ppo")
    text = render_text(plan)
    assert "5.  values           [values]           on critic_pool (local; rows split over workers)" in text
    assert "7.  update_critic    [update_critic]    on critic_pool (local; rows split over workers)" in text
    dot = render_dot(plan)
    cluster = dot.split('subgraph "cluster_critic_pool" {')[1].split("\n  }")[0]
    assert "models: critic" in cluster and '"values" [label=' in cluster and '"update_critic" [label=' in cluster
    assert "models: critic" in render_mermaid(plan)
    data = plan_to_dict(plan)
    assert {name: r["models"] for name, r in data["resources"].items()} == {
        "actor_pool": ["model"], "reward_pool": [], "critic_pool": ["critic"], "driver": []
    }  # fmt: skip
    assert {s["name"]: s["resource"] for s in data["stages"]}["update_critic"] == "critic_pool"


def test_json_lists_stages_in_order_with_their_contract():
    plan = golden_plan("remote")
    data = json.loads(render_json(plan))
    assert data["pipeline"] == "golden-remote"
    assert [s["name"] for s in data["stages"]] == list(plan.stage_names())
    first = data["stages"][0]
    assert {"name", "kind", "resource", "reads", "writes", "cadence", "verl_timer"} <= set(first)
    assert first["verl_timer"] == "gen" and first["resource"] == "engine"
    assert data["resources"]["engine"]["forwarders"] == 1 and data["resources"]["engine"]["gpus_per_worker"] == 0.0
    assert data["resources"]["engine"]["backend_config"] == {"port": 9000}
    assert [s["cadence"] for s in data["init"]] == ["resume", "init"]
    assert data == plan_to_dict(plan)


def test_dot_quotes_names_that_need_it():
    assert quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_mermaid_ids_survive_keywords_and_dots():
    text = (GOLDEN / "remote.yaml").read_text().replace("name: advantage,", "name: end,").replace(
        "name: reward,", "name: score.v2,")  # fmt: skip
    mermaid = render_mermaid(compile_plan(spec_from_yaml(text)))
    assert "s_end[" in mermaid and "s_score_v2[" in mermaid and " end[" not in mermaid


def svg_texts(path: Path) -> str:
    root = ET.parse(path).getroot()
    return "\n".join(t for el in root.iter() if el.tag.endswith("text") for t in el.itertext())


@needs_dot
@pytest.mark.parametrize("name", ["local", "remote", "async", "ppo_colocated", "ranking_ppo"])
def test_dot_draws_an_svg_naming_every_stage(tmp_path, name):
    plan = golden_plan(name)
    out = render_graphviz(render_dot(plan), tmp_path / "step.svg")
    texts = svg_texts(out)
    for stage in (*plan.step, *plan.init):
        assert stage.name in texts, stage.name
    for resource in plan.resources:
        assert resource in texts
    if name == "remote":
        assert "forwarder x1" in texts and "remote backend 'reference'" in texts
    if name == "ranking_ppo":
        assert "models: critic" in texts and "models: model" in texts
    if name == "ppo_colocated":
        assert "models: model, critic" in texts


@needs_dot
def test_dot_draws_png(tmp_path):
    out = render_graphviz(render_dot(golden_plan("local")), tmp_path / "nested" / "step.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_dot_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GraphvizMissing, match="apt-get install graphviz.*brew install graphviz"):
        render_graphviz("digraph {}", tmp_path / "x.svg")


@needs_dot
def test_dot_errors_are_reported(tmp_path):
    with pytest.raises(GraphvizFailed, match="could not draw"):
        render_graphviz("digraph { a -> ", tmp_path / "x.svg")


def test_unknown_picture_suffix_is_refused(tmp_path):
    with pytest.raises(RlflowError, match=r"unknown suffix '\.gif'"):
        render_graphviz("digraph {}", tmp_path / "x.gif")
