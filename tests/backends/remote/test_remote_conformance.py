"""The conformance kit passes for the built-in ``reference`` backend and the example plugin, on the
built-in model and on another one."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlflow.assets import RANK_WARM_START
from rlflow.testing.remote_backend import RemoteBackendConformance, prompt_batch


class TestReferenceConformance(RemoteBackendConformance):
    backend_name = "reference"
    backend_config = {"device": "cpu", "num_threads": 1, "retries": 1, "backoff_s": 0.1}

    def test_server_runs_in_its_own_process(self, backend):
        import os

        assert backend.reconnect_handle()["pid"] != os.getpid()

    def test_server_log_is_in_the_run_directory_and_the_token_is_not(self, backend, main_config):
        run_dir = Path(main_config["run_dir"])
        assert backend.log_path == run_dir / "backends" / "arctic.log"
        assert f"(pid {backend.reconnect_handle()['pid']})" in backend.log_path.read_text()
        token = backend.reconnect_handle()["token"]
        assert not any(token in p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())

    def test_traffic_is_reported_and_weight_sync_moves_no_weights(self, forwarder):
        out = forwarder.generate(prompt_batch(), {"max_response_length": 8, "seed": 1})
        assert out.metrics["forwarder/bytes_sent"] > 0 and out.metrics["forwarder/bytes_received"] > 0
        before = forwarder.traffic()
        metrics = forwarder.update_weights(5)
        after = forwarder.traffic()
        moved = sum(after[k] - before[k] for k in ("forwarder/bytes_sent", "forwarder/bytes_received"))
        assert moved < 1024  # the tiny model alone is ~16 MB: no weight crossed the wire
        assert metrics["sync/bytes"] == 0.0
        assert metrics["forwarder/bytes_sent"] == after["forwarder/bytes_sent"]


@pytest.mark.usefixtures("example_plugin", "one_torch_thread")
class TestExamplePluginConformance(RemoteBackendConformance):
    backend_name = "inproc_example"


@pytest.mark.usefixtures("example_plugin", "one_torch_thread")
class TestExamplePluginOnAnotherModel(RemoteBackendConformance):
    """``model`` points the kit at the backend's own model (here the shipped ranking warm start)."""

    backend_name = "inproc_example"
    model = {"path": str(RANK_WARM_START)}

    def test_the_backend_serves_the_model_given(self, forwarder, batch, main_config):
        from rlflow.backends.local.local_engine import LocalEngine
        from rlflow.schemas.pipeline import Pipeline

        assert main_config["pipeline"]["model"]["path"] == str(RANK_WARM_START)
        served = forwarder.compute_ref_log_prob(batch, {})["ref_log_prob"]

        def reference_log_probs(model_path: str) -> torch.Tensor:
            pipeline = Pipeline.model_validate({**main_config["pipeline"], "model": {"path": model_path}})
            root = Path(main_config["project_root"])
            engine = LocalEngine(pipeline, device="cpu", roles=frozenset({"ref"}), project_root=root)
            return engine.compute_ref_log_prob(batch, {})["ref_log_prob"]

        mask = batch["response_mask"].bool()
        assert torch.allclose(served[mask], reference_log_probs(str(RANK_WARM_START))[mask], atol=1e-5)
        assert not torch.allclose(served[mask], reference_log_probs("builtin:tiny-qwen2")[mask], atol=1e-3)
