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
LONGEST_E2E = tuple(
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
# Out once the e2e files are: its rows (two pytest sessions, pip) use the CPU that LONG_WAITS leave.
AFTER_E2E = ("tests/scripts/test_check_airflow_matrix.py",)
# The longest files that mostly wait (Slurm time limits, jobs, a daemon kept down), longest first:
# beside the matrix, not at the end of the suite, where nothing is left to use the CPU they leave.
LONG_WAITS = tuple(
    f"tests/{name}.py"
    for name in (
        "slurm_operator/integration/test_faults_real",
        "include/test_resume_local",
        "slurm_operator/hooks/test_slurm",
        "slurm_operator/integration/test_watchdog_real",
        "slurm_operator/integration/test_real_triggerer",
        "include/test_train_two_nodes",
    )
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The e2e files, longest first; the matrix; the files that wait longest; the other slow, Slurm and
    Airflow files with half the unit-test files between them (which use the CPU those leave while
    they wait); the other unit-test files last, to even out the workers' last minutes.

    ``--dist loadfile --no-loadscope-reorder`` (make test) hands out whole files in this order (xdist's
    default order puts the files with the most tests first: every one-test real-stack file came last,
    and a many-minute file handed out last runs alone while the other workers idle). Files of one rank
    keep their collection order, items of one file theirs.
    """
    ranks: dict[str, tuple[int, int]] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        ranks[path] = min(_rank(path, item), ranks.get(path, (9, 0)))
    files = sorted(ranks, key=ranks.__getitem__)  # stable: collection order within a rank
    waiting = [path for path in files if ranks[path][0] in (4, 5)]
    unit = [path for path in files if ranks[path][0] == 6]
    between, last = unit[: len(unit) // 2], unit[len(unit) // 2 :]
    order = [path for path in files if ranks[path][0] < 4]
    for index, path in enumerate(waiting):
        order.append(path)
        share = len(between) * (index + 1) // len(waiting) - len(between) * index // len(waiting)
        order += between[:share]
        between = between[share:]
    position = {path: n for n, path in enumerate([*order, *between, *last])}
    items.sort(key=lambda item: position[item.nodeid.split("::", 1)[0]])


def _rank(path: str, item: pytest.Item) -> tuple[int, int]:
    if path in LONGEST_E2E:
        return 0, LONGEST_E2E.index(path)
    if path.startswith("tests/e2e/"):
        return 1, 0
    if path in AFTER_E2E:
        return 2, 0
    if path in LONG_WAITS:
        return 3, LONG_WAITS.index(path)
    if item.get_closest_marker("slow"):
        return 4, 0
    if item.get_closest_marker("slurm") or item.get_closest_marker("airflow"):
        return 5, 0
    return 6, 0


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
