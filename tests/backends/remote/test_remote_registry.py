"""The remote-backend registry: naming rules, plugin errors, and clean failure of from_config."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import psutil
import pytest
from remote_helpers import make_main_config

from rlflow.backends.remote import (
    RemoteBackend,
    adestroy_backend,
    connect_backend,
    create_backend,
    destroy_backend,
    get,
    list_backends,
    register,
)
from rlflow.backends.remote.registry import REMOTE_BACKENDS
from rlflow.errors import BackendError, RegistryError


class _Base(RemoteBackend):
    """Enough of a backend to register; compute calls are not exercised here."""

    destroyed = 0

    @classmethod
    def from_config(cls, main_config, *, handle=None):
        return cls()

    def reconnect_handle(self):
        return {}

    def destroy(self):
        type(self).destroyed += 1

    generate = compute_log_prob = compute_ref_log_prob = update_actor = None
    update_weights = set_global_steps = save_checkpoint = load_checkpoint = None


@pytest.fixture
def scratch():
    names: list[str] = []
    yield names
    for name in names:
        REMOTE_BACKENDS.unregister(name)


def test_same_class_twice_is_fine_another_class_is_an_error(scratch):
    scratch.append("twice")

    class One(_Base):
        pass

    class Other(_Base):
        pass

    register("twice")(One)
    register("twice")(One)
    assert get("twice") is One
    with pytest.raises(
        RegistryError, match=r"'twice' is already registered by .*One; .*Other cannot take the same name"
    ):
        register("twice")(Other)


def test_only_remote_backend_subclasses_register(scratch):
    with pytest.raises(RegistryError, match="must be a subclass of rlflow.backends.remote.RemoteBackend"):
        register("plain")(object)
    assert "plain" not in list_backends()


def test_unknown_name_lists_known_ones_and_how_to_load_plugins():
    with pytest.raises(RegistryError) as info:
        get("refrence")
    message = str(info.value)
    assert "unknown remote backend 'refrence' (did you mean 'reference'?)" in message
    assert "known:" in message and "reference" in message
    assert "rlflow.remote_backends" in message and "plugins:" in message


def test_lookup_imports_no_torch():
    """Validation reads single_forwarder through the registry: it must stay cheap."""
    code = (
        "import sys; from rlflow.backends.remote.registry import get; "
        "assert get('reference').single_forwarder is True; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_the_reference_backend_is_listed_without_importing_it():
    """Knowing the name costs no import: a pipeline without a remote resource never loads the backend."""
    code = (
        "import sys; from rlflow.backends.remote import get, list_backends\n"
        "assert 'reference' in list_backends(), list_backends()\n"
        "assert 'rlflow.backends.remote.reference' not in sys.modules, 'imported to be named'\n"
        "assert get('reference').__qualname__ == 'ReferenceBackend'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_plugin_raising_in_from_config_is_a_clear_error_and_leaves_nothing_running(scratch, tmp_path):
    scratch.append("leaky")
    marker = tmp_path / "child.pid"

    @register("leaky")
    class Leaky(_Base):
        @classmethod
        def from_config(cls, main_config, *, handle=None):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            marker.write_text(str(child.pid))
            raise RuntimeError("GPU 3 is not visible")

    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        create_backend("leaky", make_main_config(tmp_path))
    message = str(info.value)
    assert "remote backend 'leaky'" in message and "Leaky" in message
    assert "failed to start: RuntimeError: GPU 3 is not visible" in message
    assert "stopped 1 process(es) it left behind" in message
    pid = int(marker.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert time.monotonic() - start < 15


def test_invalid_backend_config_names_the_field(tmp_path):
    with pytest.raises(BackendError, match=r"resources\.arctic\.config\.prot: Extra inputs are not permitted"):
        create_backend("reference", make_main_config(tmp_path, prot=1234))
    with pytest.raises(
        BackendError, match=r"resources\.arctic\.config\.port: Input should be less than or equal to 65535"
    ):
        create_backend("reference", make_main_config(tmp_path, port=70000))


def test_bad_main_config_and_handle_are_clear_errors(tmp_path):
    with pytest.raises(BackendError, match="main_config lacks backend_config, project_root, run_dir"):
        create_backend("reference", {"pipeline": {}, "resource": "arctic"})
    without_run_dir = {k: v for k, v in make_main_config(tmp_path).items() if k != "run_dir"}
    with pytest.raises(BackendError, match=r"main_config lacks run_dir \(it needs .*, project_root, run_dir\)"):
        connect_backend("reference", without_run_dir, {"host": "127.0.0.1"})
    with pytest.raises(BackendError, match="run_dir must be a path string or null, got int"):
        create_backend("reference", {**make_main_config(tmp_path), "run_dir": 3})
    with pytest.raises(BackendError, match="the reconnect handle must be a dict"):
        connect_backend("reference", make_main_config(tmp_path), "127.0.0.1:4000")
    with pytest.raises(BackendError, match="a reconnect handle needs host, port, token, protocol"):
        connect_backend("reference", make_main_config(tmp_path), {"host": "127.0.0.1"})


def test_from_config_must_return_a_backend(scratch, tmp_path):
    scratch.append("wrong")

    @register("wrong")
    class Wrong(_Base):
        @classmethod
        def from_config(cls, main_config, *, handle=None):
            return object()

    with pytest.raises(BackendError, match="Wrong.from_config returned object, not a RemoteBackend"):
        create_backend("wrong", make_main_config(tmp_path))


def test_destroy_backend_awaits_async_destroy_from_sync_and_async_code():
    class Async(_Base):
        async def destroy(self):
            await asyncio.sleep(0)
            type(self).destroyed += 1

    backend = Async()
    destroy_backend(backend)

    async def inside_a_loop():
        destroy_backend(backend)  # a running loop: the coroutine runs on a helper thread
        await adestroy_backend(backend)

    asyncio.run(inside_a_loop())
    assert Async.destroyed == 3
    assert not Async().requires_single_forwarder()
