"""The conformance kit passes for the built-in ``reference`` backend and the example plugin."""

from __future__ import annotations

import pytest

from rlflow.testing.remote_backend import RemoteBackendConformance, prompt_batch


class TestReferenceConformance(RemoteBackendConformance):
    backend_name = "reference"
    backend_config = {"device": "cpu", "num_threads": 1, "retries": 1, "backoff_s": 0.1}

    def test_server_runs_in_its_own_process(self, backend):
        import os

        assert backend.reconnect_handle()["pid"] != os.getpid()

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
