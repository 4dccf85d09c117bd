"""The reference backend's process life: start-up failures, a killed server, who stops what."""

from __future__ import annotations

import os
import signal
import tempfile
import time

import psutil
import pytest
import torch
from remote_helpers import make_main_config

from rlflow.backends.remote import connect_backend, create_backend, destroy_backend
from rlflow.batch import Batch
from rlflow.errors import BackendError

FAKE = {"engine": "remote_fake_engine:build", "num_threads": 1, "retries": 2, "backoff_s": 0.1}


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def _batch() -> Batch:
    return Batch({"prompts": torch.tensor([[1, 2], [3, 4]])}, {"uid": ["a", "b"]})


@pytest.fixture
def backend(tmp_path, fake_importable):
    backend = create_backend("reference", make_main_config(tmp_path, log_dir=str(tmp_path / "logs"), **FAKE))
    yield backend
    destroy_backend(backend)


def test_server_killed_is_a_backend_error_naming_backend_address_and_method(backend):
    handle = backend.reconnect_handle()
    assert handle["pid"] != os.getpid() and psutil.Process(handle["pid"]).ppid() == os.getpid()
    assert backend.generate(_batch(), {"max_response_length": 3})["responses"].shape == (2, 3)
    os.kill(handle["pid"], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        backend.generate(_batch(), {"max_response_length": 3})
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert (
        "remote backend 'reference'" in message and f"127.0.0.1:{handle['port']}" in message and "generate" in message
    )
    assert elapsed < 5, f"giving up took {elapsed:.1f}s"


def test_destroy_stops_the_server_it_started_but_not_one_it_joined(tmp_path, fake_importable):
    main_config = make_main_config(tmp_path, log_dir=str(tmp_path / "logs"), **FAKE)
    owner = create_backend("reference", main_config)
    pid = owner.reconnect_handle()["pid"]
    joined = connect_backend("reference", main_config, owner.reconnect_handle())
    destroy_backend(joined)
    joined_via_config = create_backend("reference", make_main_config(tmp_path, handle=owner.reconnect_handle()))
    destroy_backend(joined_via_config)
    assert psutil.pid_exists(pid) and owner.update_weights(1)["fake/updates_applied"] == 0.0
    destroy_backend(owner)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (tmp_path / "logs" / "serve.json").exists()  # the file with the token is gone
    assert "shutdown requested" in (tmp_path / "logs" / "server.log").read_text()


def test_in_a_run_the_log_goes_to_the_run_directory_and_token_files_stay_out(tmp_path, fake_importable, monkeypatch):
    private = tmp_path / "tmp"  # where the server's config and handle (both hold the token) are written
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for _ in range(2):  # a restarted backend (trainer.max_restarts) appends to the same log
        backend = create_backend("reference", make_main_config(tmp_path, run_dir=run_dir, **FAKE))
        assert backend.log_path == run_dir / "backends" / "arctic.log"
        destroy_backend(backend)
    assert [p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()] == ["backends/arctic.log"]
    log = backend.log_path.read_text()
    assert log.count("serving backend 'reference'") == 2 and "shutdown requested" in log
    assert not list(private.iterdir()), "the private folder is removed once the server is stopped"


def test_server_dying_during_startup_reports_its_log_and_leaves_nothing(tmp_path, fake_importable):
    before = _children()
    config = make_main_config(tmp_path, **{**FAKE, "engine": "remote_fake_engine:explode"}, log_dir=str(tmp_path))
    with pytest.raises(BackendError) as info:
        create_backend("reference", config)
    message = str(info.value)
    assert "exited with code 1 during start-up" in message
    assert "the fake engine refuses to start (resource arctic)" in message  # the log's tail
    assert _children() <= before


def test_server_missing_its_startup_timeout_is_stopped(tmp_path, fake_importable):
    before = _children()
    config = make_main_config(tmp_path, **{**FAKE, "engine": "remote_fake_engine:hang"}, startup_timeout_s=1.0)
    with pytest.raises(BackendError, match=r"did not come up within startup_timeout_s=1 \(raise it"):
        create_backend("reference", config)
    assert _children() <= before


def test_joining_needs_a_readable_handle_file(tmp_path):
    with pytest.raises(
        BackendError, match=r"cannot read handle_file .*missing\.json.*rlflow backend serve --handle-file"
    ):
        create_backend("reference", make_main_config(tmp_path, handle_file="missing.json"))


@pytest.mark.timeout(60)
def test_a_fifo_as_handle_file_is_refused_at_once(tmp_path):
    """A FIFO nobody writes as handle_file hung the run after "start Ray": it goes through the bounded reader."""
    os.mkfifo(tmp_path / "pipe.json")
    with pytest.raises(BackendError, match=r"cannot read handle_file .*pipe\.json'?: a FIFO \(named pipe\), not a"):
        create_backend("reference", make_main_config(tmp_path, handle_file="pipe.json"))
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(BackendError, match=r"list\.json' holds a JSON list, not the handle object"):
        create_backend("reference", make_main_config(tmp_path, handle_file="list.json"))
