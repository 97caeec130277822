"""Session-wide test set-up: a private PostgreSQL for Airflow, isolated Airflow and Hugging Face homes."""

from __future__ import annotations

import os
from collections.abc import Callable

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
    "tests.fixtures.jump_host",
    "tests.fixtures.airflow_env",
    "tests.fixtures.airflow_stack",
]


def pytest_unconfigure(config: pytest.Config) -> None:
    """The process that started the session's server stops it (a no-op in xdist workers)."""
    session.tear_down()


@pytest.fixture
def figure(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a measured figure (a fault's delay, a relay count): printed in the run's summary."""

    def record(text: str) -> None:
        request.node.user_properties.append(("figure", text))

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The figures the tests measured (xdist carries user_properties back in the reports)."""
    lines = [
        f"{report.nodeid.rsplit('::', 1)[-1]}: {value}"
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        if report.when == "call"
        for key, value in report.user_properties
        if key == "figure"
    ]
    if lines:
        terminalreporter.write_sep("-", "measured figures")
        for line in lines:
            terminalreporter.write_line(line)
