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


# The e2e files by length, longest first: the demo's sets the suite's floor when whole files are handed
# out; the short ones (not listed) come last, so that AFTER_E2E starts soon after the e2e files stop
# filling the CPU (a worker holds its next file until its current one ends).
LONGEST_FIRST = tuple(
    f"tests/e2e/test_{name}.py"
    for name in (
        "demo_campaign",
        "failed_trainings",
        "stop_training",
        "database_restart",
        "checkpoints_kept",
        "sweeps",
        "campaign_ui",
        "scale_out",
    )
)
# Out once the e2e files are: its rows (two pytest sessions, pip) fill the CPU the later files leave.
AFTER_E2E = ("tests/scripts/test_check_airflow_matrix.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Real-stack files first, the longest at the head; then the slow, Slurm and Airflow files with half
    the unit-test files between them; the other unit-test files last.

    ``--dist loadfile --no-loadscope-reorder`` (make test) hands out whole files in this order (xdist's
    default order puts the files with the most tests first: every one-test real-stack file came last,
    and a many-minute file handed out last runs alone while the other workers idle). The Slurm and
    fault files mostly wait on jobs and timers: unit-test files between them use the CPU they leave,
    and the rest at the end even out the workers' last minutes. Items of one file keep their order.
    """
    ranks: dict[str, int] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        ranks[path] = min(_rank(path, item), ranks.get(path, 9))
    by_rank: dict[int, list[str]] = {}
    for path, rank in ranks.items():  # collection order within a rank
        by_rank.setdefault(rank, []).append(path)
    waiting, unit = [*by_rank.get(3, []), *by_rank.get(4, [])], by_rank.get(5, [])
    between, last = unit[: len(unit) // 2], unit[len(unit) // 2 :]
    mixed = []
    for index, path in enumerate(waiting):
        mixed.append(path)
        share = len(between) * (index + 1) // len(waiting) - len(between) * index // len(waiting)
        mixed += between[:share]
        between = between[share:]
    longest = sorted(by_rank.get(0, []), key=LONGEST_FIRST.index)
    order = [*longest, *by_rank.get(1, []), *by_rank.get(2, []), *mixed, *between, *last]
    position = {path: n for n, path in enumerate(order)}
    items.sort(key=lambda item: position[item.nodeid.split("::", 1)[0]])


def _rank(path: str, item: pytest.Item) -> int:
    if path in LONGEST_FIRST:
        return 0
    if path.startswith("tests/e2e/"):
        return 1
    if path in AFTER_E2E:
        return 2
    if item.get_closest_marker("slow"):
        return 3
    if item.get_closest_marker("slurm") or item.get_closest_marker("airflow"):
        return 4
    return 5


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
