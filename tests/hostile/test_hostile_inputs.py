"""Hostile input across every surface, each refused cleanly with nothing written outside the run directory.

Surfaces: pipeline templates, YAML tags and aliases, binary garbage, data and database paths
that escape the data root, SQL written by a model, the remote backend's socket (wrong token,
garbage frames) and a plugin that raises. Each case runs through the real entry point (the
CLI in a subprocess, the reward stage, a real backend server process) inside a sandbox whose
files are listed before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlflow.assets import BIRD_SAMPLE

REPO = Path(__file__).resolve().parents[2]
SAMPLE = BIRD_SAMPLE
PIPELINE = (REPO / "pipelines" / "bird_grpo.yaml").read_text()


def snapshot(*roots: Path) -> dict[str, str]:
    """Path -> content hash of every file under ``roots``."""
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def sandbox(tmp_path: Path):
    """A project with its own copy of the sample, a private HOME and a marker path that must never appear."""
    project = tmp_path / "project"
    shutil.copytree(SAMPLE, project / "data")
    (project / "home").mkdir()
    (project / "rlflow.yaml").write_text("vars: {model_path: 'builtin:tiny-qwen2', bird_root: data}\nruns_dir: runs\n")
    return project


def rlflow(project: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HOME": str(project / "home"),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": f"{project}{os.pathsep}{REPO}",
    }  # this checkout, whatever is installed
    return subprocess.run(
        [sys.executable, "-m", "rlflow.cli.main", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_refused(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    for text in expected:
        assert text in result.stderr, (text, result.stderr[-2000:])


HOSTILE_PIPELINES = {
    "template_escape": ("name: x\ndescription: \"{{ ''.__class__.__mro__[1].__subclasses__() }}\"\n", "unsafe"),
    "template_os": ("name: \"{{ cycler.__init__.__globals__.os.system('touch MARKER') }}\"\n", "unsafe"),
    "python_tag": ("name: !!python/object/apply:os.system ['touch MARKER']\n", "python/object/apply"),
    "alias_bomb": (
        "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
        "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        "g: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n",
        "alias",
    ),
    "binary_garbage": (None, "binary"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_PIPELINES))
def test_hostile_pipeline_files_are_refused_without_effect(sandbox, case):
    text, expected = HOSTILE_PIPELINES[case]
    path = sandbox / f"{case}.yaml"
    path.write_bytes(bytes(range(256)) * 2 if text is None else text.encode())
    before = snapshot(sandbox)
    for command in ("validate", "run"):
        result = rlflow(sandbox, command, path.name)
        assert_refused(result, f"{case}.yaml:")
        assert expected.lower() in result.stderr.lower(), result.stderr[-1500:]
    assert snapshot(sandbox) == before, "a refused file changed something on disk"
    assert not (sandbox / "MARKER").exists()


def test_data_paths_outside_the_data_root_are_refused(sandbox):
    outside = sandbox / "outside.json"
    outside.write_text(json.dumps([{"db_id": "shop", "question": "q", "evidence": "", "SQL": "SELECT 1"}]))
    (sandbox / "p.yaml").write_text(PIPELINE)
    before = snapshot(sandbox)
    result = rlflow(sandbox, "run", "p.yaml", "--set", "data.root=data", "--set", "data.train=data/../outside.json")
    assert_refused(result, "outside.json", "data root")
    assert not (sandbox / "runs").exists() or not any((sandbox / "runs").rglob("metrics.jsonl"))
    assert {k: v for k, v in snapshot(sandbox).items() if "/runs/" not in k} == before


def test_a_database_id_that_escapes_is_refused(sandbox):
    rows = json.loads((sandbox / "data" / "train.json").read_text())
    rows[0]["db_id"] = "../../home/evil"
    (sandbox / "data" / "train.json").write_text(json.dumps(rows))
    (sandbox / "p.yaml").write_text(PIPELINE)
    before = snapshot(sandbox)
    result = rlflow(sandbox, "run", "p.yaml")
    assert_refused(result, "train.json", "db_id '../../home/evil' is not a plain name")
    assert {k: v for k, v in snapshot(sandbox).items() if "/runs/" not in k} == before


def test_a_byte_that_is_not_utf8_in_a_data_file_is_named_and_no_run_dir_is_left(sandbox):
    train = sandbox / "data" / "train.json"
    raw = train.read_bytes()
    offset = raw.index(b'"question"') + 1
    train.write_bytes(raw[:offset] + b"\xe9" + raw[offset:])  # a Latin-1 e-acute inside a key
    (sandbox / "p.yaml").write_text(PIPELINE)
    before = snapshot(sandbox)
    result = rlflow(sandbox, "run", "p.yaml")
    assert_refused(result, "train.json:", f"byte 0xe9 at offset {offset} is not UTF-8")
    assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
    assert snapshot(sandbox) == before and not (sandbox / "runs").exists(), "a run that failed early left files"


HOSTILE_SQL = [
    "DROP TABLE product",
    "DELETE FROM product",
    "INSERT INTO product VALUES (999, 'x', 1.0, 'x')",
    "ATTACH DATABASE 'pwned.db' AS pwned",
    "PRAGMA writable_schema=1",
    "SELECT load_extension('libc.so.6')",
    "SELECT 1; DROP TABLE product",
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c",
    "SELECT count(*) FROM product a, product b, product c, product d, product e, product f",
]


def test_hostile_sql_is_refused_and_the_database_is_untouched(sandbox):
    import time

    import torch

    from rlflow.batch import Batch
    from rlflow.check import load_pipeline
    from rlflow.schemas.project import load_project_config
    from rlflow.stages.base import StageContext
    from rlflow.stages.text2sql_reward import Text2SqlReward, Text2SqlRewardConfig

    (sandbox / "p.yaml").write_text(PIPELINE)
    spec = load_pipeline(sandbox / "p.yaml", project=load_project_config(sandbox)).spec
    db_dir = sandbox / "data" / "databases" / "shop"
    db = db_dir / "shop.sqlite"
    before = snapshot(db_dir)
    rows = len(HOSTILE_SQL)
    batch = Batch(
        {"response_mask": torch.ones(rows, 8, dtype=torch.long)},
        {
            "response_text": [f"```sql\n{sql}\n```" for sql in HOSTILE_SQL],
            "reward_info": [
                {"ground_truth": "SELECT count(*) FROM product", "extra_info": {"db_path": str(db), "db_id": "shop"}}
            ]
            * rows,
        },
    )
    config = Text2SqlRewardConfig(timeout_s=1.0)
    ctx = StageContext(pipeline=spec, config=config, stage_name="reward")
    start = time.time()
    out = Text2SqlReward().run(batch, ctx)
    assert time.time() - start < rows * (config.timeout_s + 1.0)
    assert out["scores"].tolist() == [0.0] * rows
    assert snapshot(db_dir) == before, "the database folder changed"
    assert not (sandbox / "pwned.db").exists() and not Path("pwned.db").exists()


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory):
    """A real reference backend server process with the tiny model."""
    from rlflow.backends.remote.registry import create_backend
    from rlflow.schemas.pipeline import Pipeline

    root = tmp_path_factory.mktemp("backend")
    pipeline = Pipeline.model_validate(
        {
            "name": "hostile",
            "data": {"train": "t.json", "max_prompt_length": 16, "max_response_length": 8},
            "algorithm": {"n": 2},
            "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2},
            "resources": {"arctic": {"type": "remote", "backend": "reference"}},
            "stages": [{"name": "generate", "uses": "generate", "on": "arctic"}],
        }
    )
    main_config = {
        "pipeline": pipeline.model_dump(by_alias=True, mode="json"),
        "resource": "arctic",
        "backend_config": {"num_threads": 1},
        "project_root": str(root),
        "run_dir": None,
    }
    backend = create_backend("reference", main_config)
    yield backend
    backend.destroy()


def _raw(handle: dict, payload: bytes) -> bytes:
    with socket.create_connection((handle["host"], handle["port"]), timeout=10) as sock:
        sock.sendall(payload)
        try:
            return sock.recv(4096)
        except OSError:
            return b""


@pytest.mark.parametrize("token", ["", "wrong-token", None])
def test_backend_refuses_a_wrong_or_missing_token_and_executes_nothing(reference_server, token):
    from rlflow.backends.remote import wire
    from rlflow.errors import BackendError

    handle = reference_server.reconnect_handle()
    hello = {"kind": "hello", "version": wire.PROTOCOL_VERSION, **({} if token is None else {"token": token})}
    reply = _raw(handle, b"".join(bytes(b) for b in wire.encode(hello)))
    assert b"authentication failed" in reply or reply == b""
    forged = {**handle, "token": token or "x"}
    from rlflow.backends.remote.client import BackendClient

    with pytest.raises(BackendError, match="token"):
        BackendClient(forged, backend="reference", retries=0).call("set_global_steps", {"global_steps": 99})
    reference_server.set_global_steps(3)  # the real handle still works: the server kept serving


@pytest.mark.parametrize("payload", [os.urandom(64), b"RLFW" + b"\xff" * 60, b"RLFW\x01\x00\x00\x00" + b"\x7f" * 16])
def test_backend_survives_garbage_frames(reference_server, payload):
    _raw(reference_server.reconnect_handle(), payload)
    reference_server.set_global_steps(4)


def test_a_plugin_that_raises_is_reported_cleanly(sandbox):
    (sandbox / "evil_plugin.py").write_text("raise RuntimeError('plugin exploded on import')\n")
    (sandbox / "rlflow.yaml").write_text((sandbox / "rlflow.yaml").read_text() + "plugins: [evil_plugin]\n")
    (sandbox / "p.yaml").write_text(PIPELINE)
    before = snapshot(sandbox)
    for command in ("validate", "run"):
        result = rlflow(sandbox, command, "p.yaml")
        assert_refused(result, "evil_plugin", "plugin exploded on import")
    assert snapshot(sandbox) == before


LYING_ENGINE = '''
import torch
from rlflow.backends.engine import Engine
from rlflow.batch import Batch


class Lying(Engine):
    """Answers generate with NaN 'token ids': the right shape, the wrong dtype."""

    def generate(self, batch, params):
        rows, width = len(batch), int(params["max_response_length"])
        return Batch(
            {"responses": torch.full((rows, width), float("nan")), "response_mask": torch.ones(rows, width, dtype=torch.long)},
            {"response_text": ["SELECT 1"] * rows},
        )

    def update_weights(self, global_steps):
        return {}

    def set_global_steps(self, global_steps):
        pass

    compute_log_prob = compute_ref_log_prob = update_actor = save_checkpoint = load_checkpoint = None


def build(main_config):
    return Lying()
'''


def test_a_backend_that_returns_floats_for_token_ids_stops_the_run_at_the_rollout(sandbox, monkeypatch):
    """A real reference server with a lying engine, under the step loop: refused before the reward sees a row."""
    from rlflow.check import load_pipeline
    from rlflow.errors import StageError
    from rlflow.plan.compile import compile_plan
    from rlflow.runtime.inprocess import InProcessExecutor
    from rlflow.runtime.restarts import main_config
    from rlflow.runtime.run_dir import RunDir
    from rlflow.runtime.step_loop import StepLoop, load_data
    from rlflow.schemas.project import load_project_config

    (sandbox / "lying_engine.py").write_text(LYING_ENGINE)
    (sandbox / "p.yaml").write_text((REPO / "pipelines" / "bird_grpo_remote.yaml").read_text())
    (sandbox / "bird_grpo.yaml").write_text(PIPELINE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(sandbox), os.environ.get("PYTHONPATH", "")]))
    project = load_project_config(sandbox)
    sets = [
        *("trainer.train_batch_size=2", "trainer.ppo_mini_batch_size=2", "trainer.ppo_micro_batch_size_per_gpu=4"),
        *("algorithm.n=2", "data.max_response_length=8", "trainer.val_before_train=false"),
        'resources.arctic.config={engine: "lying_engine:build", num_threads: 1, retries: 0}',
    ]
    spec = load_pipeline(sandbox / "p.yaml", sets, project).spec
    plan, pipeline_dict = compile_plan(spec), spec.model_dump(by_alias=True, mode="json")
    before = snapshot(sandbox)
    rd = RunDir(sandbox / "runs" / "lying")
    executor = InProcessExecutor(
        plan,
        spec,
        str(sandbox),
        rd.append_trace,
        str(rd.path),
        main_config_for=lambda p: main_config(pipeline_dict, p, project, rd.path),
    )
    try:
        loop = StepLoop(spec, plan, executor, rd, load_data(spec, sandbox), "", [])
        with pytest.raises(
            StageError, match=r"stage 'generate' on remote backend 'reference' \(resource 'arctic'\)"
        ) as info:
            loop.mode.step(loop.init(None))
    finally:
        executor.close()
    assert "field 'responses': expected [rows, 8] integer, got [4, 8] float32" in str(info.value)
    trace = (rd.path / "trace.jsonl").read_text().splitlines()
    assert not [t for t in map(json.loads, trace) if t["stage"] == "reward"], "the reward saw the batch"
    assert {k: v for k, v in snapshot(sandbox).items() if "/runs/" not in k} == before
