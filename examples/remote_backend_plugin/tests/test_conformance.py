"""What a plugin's own test suite needs: the conformance kit, pointed at the plugin's name."""

from rlflow.testing.remote_backend import RemoteBackendConformance


class TestInProcessBackend(RemoteBackendConformance):
    backend_name = "inproc_example"
