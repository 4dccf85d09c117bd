"""Test helpers rlflow ships for plugin authors (they need pytest): see ``rlflow.testing.remote_backend``."""
