"""Session-wide test set-up: a private PostgreSQL for Airflow, isolated Airflow and Hugging Face homes."""

from __future__ import annotations

import os
import sys
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


# The longest file first: it sets the suite's floor when whole files are handed out.
LONGEST_FIRST = ("tests/e2e/test_demo_campaign.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Real-stack files first, the longest of them at the head, unit tests last.

    ``--dist loadfile --no-loadscope-reorder`` (make test) hands out whole files in collection order
    (xdist's default order puts the files with the most tests first: every one-test real-stack file
    came last); a many-minute file handed out last runs alone while the other workers idle. Items of
    one file keep their order.
    """
    rank: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in LONGEST_FIRST:
            here = 0
        elif path.startswith("tests/e2e/"):
            here = 1
        elif item.get_closest_marker("slow"):
            here = 2
        elif item.get_closest_marker("slurm") or item.get_closest_marker("airflow"):
            here = 3
        else:
            here = 4
        rank[path] = min(here, rank.get(path, here))
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Shut down megatron-core's results-queue Manager where a test started one in this process.

    Its first torch_dist save starts a spawned Manager server, shut down by a finalizer at a normal
    interpreter exit; the trainer tests save in-process, and an xdist worker that does not exit
    normally leaves the server orphaned, and with it a run that never ends.
    """
    module = sys.modules.get("megatron.core.dist_checkpointing.strategies.filesystem_async")
    manager = getattr(getattr(module, "_results_queue", None), "_manager", None)
    if manager is not None:
        manager.shutdown()


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
