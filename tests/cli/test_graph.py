"""``rlflow graph``: formats, files, --set, --render with and without Graphviz, timelines, and lightness."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlflow.cli.app import app
from rlflow.errors import ConfigError, RlflowError

REPO = Path(__file__).resolve().parents[2]
BIRD = "pipelines/bird_grpo.yaml"
STEP = ["generate", "reward", "old_log_prob", "ref_log_prob", "advantage", "update_actor", "save_checkpoint",
        "sync_weights", "validate"]  # fmt: skip
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


@pytest.fixture(autouse=True)
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)  # rlflow.yaml (template vars) is found from the working directory


def graph(*args: str):
    return CliRunner().invoke(app, ["graph", *args])


def test_text_lists_the_step_in_order():
    result = graph(BIRD)
    assert result.exit_code == 0, result.output
    positions = [result.output.index(f"{i}.  {name}") for i, name in enumerate(STEP, 1)]
    assert positions == sorted(positions)
    assert "loop: sync_weights --rollout_weights--> generate of the next step" in result.output


def test_the_shipped_async_pipeline_shows_its_lanes_and_staleness_edge():
    text = graph("pipelines/bird_grpo_async.yaml").output
    assert "  rollout_pool  rollout lane: generate, validate\n" in text
    # bypass mode: the rollout's log-probs are the old policy, so no old_log_prob pass on the trainer lane
    assert "  actor_pool    trainer lane: ref_log_prob, update_actor, save_checkpoint, sync_weights\n" in text
    assert "staleness: sync_weights --weights, up to 1 version behind--> generate" in text
    assert "generate (t+1) beside reward, ref_log_prob, advantage, update_actor" in text
    mermaid = graph("pipelines/bird_grpo_async.yaml", "--format", "mermaid").output
    assert 'subgraph r_rollout_pool["rollout lane: rollout_pool' in mermaid and "weights, up to 1 version" in mermaid
    dot = graph("pipelines/bird_grpo_async.yaml", "--format", "dot").output
    assert 'label="rollout lane: rollout_pool' in dot and 'label="trainer lane: actor_pool' in dot
    as_sync = graph("pipelines/bird_grpo_async.yaml", "--set", "trainer.trainer_mode=sync").output
    assert "lane" not in as_sync and "staleness" not in as_sync and "beside" not in as_sync


def test_json_and_set_override():
    result = graph(BIRD, "--format", "json", "--set", "trainer.save_freq=-1")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [s["name"] for s in data["stages"]] == [s for s in STEP if s != "save_checkpoint"]


def test_a_dropped_stage_leaves_the_step():
    result = graph(BIRD, "--format", "json", "--drop", "ref_log_prob", "--set", "algorithm.use_kl_loss=false")
    assert result.exit_code == 0, result.output
    assert [s["name"] for s in json.loads(result.output)["stages"]] == [s for s in STEP if s != "ref_log_prob"]


@pytest.mark.parametrize(("fmt", "marker"), [("mermaid", "flowchart LR"), ("dot", 'digraph "bird-grpo"')])
def test_formats_to_a_file(tmp_path, fmt, marker):
    out = tmp_path / f"step.{fmt}"
    result = graph(BIRD, "--format", fmt, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_text().startswith(marker)


@needs_dot
def test_render_draws_svg_with_every_stage(tmp_path):
    out = tmp_path / "pictures" / "step.svg"
    result = graph(BIRD, "--render", "-o", str(out))
    assert result.exit_code == 0, result.output
    texts = "".join(ET.parse(out).getroot().itertext())
    assert all(name in texts for name in STEP)


@needs_dot
@pytest.mark.parametrize("sets", [(), ("stages.4.on=actor_pool", "stages.6.on=actor_pool")], ids=["own", "colocated"])
def test_ppo_draws_its_critic_with_the_models_each_pool_loads(tmp_path, sets):
    overrides = [arg for s in sets for arg in ("--set", s)]
    text = graph("pipelines/ranking_ppo.yaml", *overrides).output
    out = tmp_path / "ppo.svg"
    assert graph("pipelines/ranking_ppo.yaml", *overrides, "--render", "-o", str(out)).exit_code == 0
    texts = "".join(ET.parse(out).getroot().itertext())
    pool = "critic_pool" if not sets else "actor_pool"
    for name in ("values", "update_critic"):
        assert f"on {pool} (local; rows split over workers)" in text.split(f"  {name}  ")[1].splitlines()[0]
        assert name in texts
    if sets:
        assert "models: model, critic" in text and "models: model, critic" in texts
    else:
        assert "models: model\n" in text and "models: critic\n" in text and "models: critic" in texts


def test_render_without_graphviz_writes_the_dot_file_and_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = graph(BIRD, "--render", "-o", str(tmp_path / "step.png"))
    assert isinstance(result.exception, RlflowError)
    assert "apt-get install graphviz" in str(result.exception) and "brew install graphviz" in str(result.exception)
    assert (tmp_path / "step.dot").read_text().startswith('digraph "bird-grpo"')
    assert not (tmp_path / "step.png").exists()


def test_invalid_pipeline_reports_every_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((REPO / BIRD).read_text().replace("on: reward_pool}", "on: reward_pol}").replace(
        "  - {name: old_log_prob, uses: old_log_prob,    on: actor_pool}\n", ""))  # fmt: skip
    result = graph(str(bad))
    assert isinstance(result.exception, ConfigError)
    message = str(result.exception)
    assert "unknown resource 'reward_pol'" in message and "'old_log_probs'" in message


def test_usage_errors():
    assert graph().exit_code == 2
    assert graph(BIRD, "--format", "svg").exit_code == 2
    assert graph(BIRD, "--timeline", ".").exit_code == 2


def write_trace(run_dir: Path) -> None:
    run_dir.mkdir()
    rows = [(0, "sync_weights", 0.0, 1.0), (1, "generate", 1.0, 4.0), (1, "update_actor", 4.0, 5.0)]
    run_dir.joinpath("trace.jsonl").write_text("".join(
        json.dumps({"step": s, "stage": n, "resource": "actor", "pid": 7, "start": a, "end": b}) + "\n"
        for s, n, a, b in rows))  # fmt: skip


def test_timeline_summary_and_chart(tmp_path):
    write_trace(tmp_path / "run")
    result = graph("--timeline", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[1].split() == ["generate", "1", "3.000", "3.000", "75.0%"]
    out = tmp_path / "timeline.svg"
    result = graph("--timeline", str(tmp_path / "run"), "--render", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "generate" in "".join(ET.parse(out).getroot().itertext())


def test_a_run_directory_without_timeline_is_answered_with_the_command_to_chart_it(tmp_path):
    write_trace(tmp_path / "run")
    result = graph(str(tmp_path / "run"))
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == (
        f"{tmp_path / 'run'} is a run directory, not a pipeline file "
        f"(to chart its trace: rlflow graph --timeline {tmp_path / 'run'})"
    )
    assert (
        str(graph(str(tmp_path)).exception)
        == f"{tmp_path} is a folder, not a pipeline file (give a pipeline YAML file)"
    )


def test_timeline_text_reports_resource_idle_shares_and_overlapping_steps(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    rows = [(1, "generate", "rollout", 0.0, 2.0), (2, "generate", "rollout", 2.0, 4.0),
            (1, "update_actor", "actor", 2.0, 5.0), (2, "update_actor", "actor", 5.0, 8.0)]  # fmt: skip
    run_dir.joinpath("trace.jsonl").write_text("".join(
        json.dumps({"step": s, "stage": n, "resource": r, "pid": 7, "start": a, "end": b}) + "\n"
        for s, n, r, a, b in rows))  # fmt: skip
    result = graph("--timeline", str(run_dir))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[1].split() == ["update_actor", "2", "6.000", "3.000", "75.0%"]  # of 8 s wall, counted once
    start = lines.index(next(line for line in lines if line.startswith("resource")))
    assert lines[start + 1].split() == ["rollout", "1", "4.000", "50.0%", "50.0%"]
    assert lines[start + 2].split() == ["actor", "1", "6.000", "75.0%", "25.0%"]
    assert (
        lines[-1]
        == "steps in flight together: 3.000 s of 8.000 s wall (1 of 2 steps started before an earlier one ended)"
    )


def test_timeline_of_a_real_run_has_its_start_up_and_every_worker(short_run, tmp_path):
    run_dir, _ = short_run
    out = tmp_path / "timeline.svg"
    result = graph("--timeline", str(run_dir), "--render", "-o", str(out), "--steps", "0-1")
    assert result.exit_code == 0, result.output
    texts = "".join(ET.parse(out).getroot().itertext())
    for label in ("start-up (driver)", "start Ray", "load model on actor_pool", "actor_pool (pid", "reward_pool (pid",
                  "idle", "generate", "update_actor", "bird-grpo · run two-steps · timeline of steps 0-1"):  # fmt: skip
        assert label in texts, label
    png = tmp_path / "timeline.png"
    assert graph("--timeline", str(run_dir), "--render", "-o", str(png)).exit_code == 0
    assert png.stat().st_size > 20_000
    summary = graph("--timeline", str(run_dir), "--steps", "2")
    assert summary.exit_code == 0 and "(init)" not in summary.output and "generate" in summary.output


def test_step_ranges_are_checked():
    assert graph(BIRD, "--steps", "1-2").exit_code == 2
    assert graph("--timeline", ".", "--steps", "3-1").exit_code == 2
    assert "not a step range" in graph("--timeline", ".", "--steps", "x").output


def test_graph_stays_light():
    """Drawing a pipeline must not import the training stack (it starts as fast as validate)."""
    code = (
        "import sys; from typer.testing import CliRunner; from rlflow.cli.app import app; "
        f"r = CliRunner().invoke(app, ['graph', {BIRD!r}, '--format', 'dot']); assert r.exit_code == 0, r.output; "
        "print(sorted(m for m in ('torch', 'ray', 'verl', 'transformers', 'matplotlib') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
