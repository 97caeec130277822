"""Fixtures for include/ tests: the demo dataset fixture is shared with tests/autoexp_cluster."""

from tests.autoexp_cluster.conftest import demo_data

__all__ = ["demo_data"]
