"""``rlflow backend serve``: a foreground server that prints a handle a run joins with."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from remote_helpers import make_main_config

from rlflow.backends.remote import create_backend, destroy_backend
from rlflow.batch import Batch
from rlflow.cli.backend import _main_config
from rlflow.errors import ConfigError

REPO = Path(__file__).parents[3]


def test_serve_prints_a_handle_that_a_run_joins_and_stops_on_ctrl_c(tmp_path, fake_importable):
    main_config = make_main_config(tmp_path, engine="remote_fake_engine:build", num_threads=1)
    config_file = tmp_path / "main_config.json"
    config_file.write_text(json.dumps(main_config))
    handle_file = tmp_path / "arctic.handle.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlflow.cli.main",
            "backend",
            "serve",
            str(config_file),
            "--handle-file",
            str(handle_file),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        handle = json.loads(proc.stdout.readline())
        assert handle["pid"] == proc.pid and handle["host"] == "127.0.0.1" and handle["protocol"] == 1
        assert json.loads(handle_file.read_text()) == handle
        assert oct(handle_file.stat().st_mode & 0o777) == "0o600"
        joined = create_backend("reference", make_main_config(tmp_path, handle_file=str(handle_file)))
        out = joined.generate(Batch({"prompts": torch.tensor([[1, 2]])}, {"uid": ["a"]}), {"max_response_length": 2})
        assert out["responses"].tolist() == [[3, 4]]
        destroy_backend(joined)  # joined, not owned: the server stays up
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        # communicate() drains stderr while waiting: a server blocked on a full pipe never exits
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
            pytest.fail(f"the server did not exit within 60 s of Ctrl-C; its stderr:\n{stderr[-4000:]}")
        assert proc.returncode == 0, stderr[-4000:]
        assert handle["token"] not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_stops_a_server_started_with_sigint_ignored(tmp_path, fake_importable):
    """A parent that ignores SIGINT (a background shell job, a test runner) passes that on to children."""
    config_file = tmp_path / "main_config.json"
    config_file.write_text(json.dumps(make_main_config(tmp_path, engine="remote_fake_engine:build", num_threads=1)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlflow.cli.main", "backend", "serve", str(config_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert json.loads(proc.stdout.readline())["pid"] == proc.pid
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail("the server ignored Ctrl-C because its parent ignored SIGINT")
        assert proc.returncode == 0, stderr[-4000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_pipeline_file_serves_its_reference_resource(monkeypatch):
    monkeypatch.chdir(REPO)
    main_config = _main_config(REPO / "pipelines" / "bird_grpo_remote.yaml", None, ())
    assert main_config["resource"] == "arctic" and main_config["backend_config"] == {}
    assert main_config["project_root"] == str(REPO)
    assert main_config["pipeline"]["stages"][0]["on"] == "arctic"
    with pytest.raises(ConfigError, match="resources.reward_pool: no remote resource of that name"):
        _main_config(REPO / "pipelines" / "bird_grpo_remote.yaml", "reward_pool", ())
