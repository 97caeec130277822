"""Session-wide test set-up: a private PostgreSQL for Airflow, isolated Airflow and Hugging Face homes."""

from __future__ import annotations

import os

import pytest

from tests.fixtures import session

# Airflow and Hugging Face read their settings at import time, so these are set before any test
# module imports them. Each pytest session gets private folders and its own PostgreSQL server
# (tests/fixtures/session.py); each process (xdist worker) its own Airflow home and database.
# Nothing touches ~/airflow or ~/.cache.
session.set_up()
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("HF_HOME", str(session.session_dir() / "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest_plugins = [
    "tests.fixtures.slurm_cluster",
    "tests.fixtures.airflow_env",
    "tests.fixtures.airflow_stack",
]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process that started the session's server stops it (a no-op in xdist workers)."""
    session.tear_down()
