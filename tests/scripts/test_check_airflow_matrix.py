"""autoexp beside the older Airflow minors: scripts/check-airflow-matrix, run whole as part of the suite.

A test of its own, not a step after pytest, so that ``--dist loadfile`` hands it out once the e2e files
are out (tests/conftest.py): its rows then run beside the suite's Slurm-bound and fault tests, which
wait far more than they compute, instead of on a machine the suite has left.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.scripts import REPO

LOG = REPO / ".state" / "matrix.log"
# What this session set for its own processes (tests/conftest.py, tests/fixtures/session.py, xdist):
# each of the matrix's pytest sessions must set up its own folder, PostgreSQL and cluster, not join ours.
SESSION_ONLY = ("AIRFLOW", "AUTOEXP_TEST_", "PYTEST_", "HF_", "TRANSFORMERS_OFFLINE")


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_older_airflow_row_keeps_its_airflow_and_passes(figure: Callable[[str], None]) -> None:
    env = {name: value for name, value in os.environ.items() if not name.startswith(SESSION_ONLY)}
    LOG.parent.mkdir(exist_ok=True)
    with LOG.open("w") as out:
        # No bound of its own: pytest-timeout's above (a cold run alone takes ~200 s).
        script = subprocess.run(
            [REPO / "scripts" / "check-airflow-matrix"], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    lines = LOG.read_text(errors="replace").splitlines()
    ended = f"scripts/check-airflow-matrix exited {script.returncode} (its whole output: {LOG})"
    assert script.returncode == 0, "\n".join([*lines[-80:], ended])
    summary = [line for line in lines if line.startswith("check-airflow-matrix:")]
    for line in summary:
        figure(line)
    assert summary, lines[-20:]
    assert summary[-1].startswith("check-airflow-matrix: all passed:"), summary


def test_a_venv_another_run_is_building_is_waited_for_not_built_beside_it(tmp_path: Path) -> None:
    """`make test` builds the venvs (--venvs) while the suite's matrix test may start: one waits."""
    matrix = tmp_path / "matrix"
    matrix.mkdir()
    # No python3.10 to be found (no pyenv under this HOME): a build that starts dies at once, saying so.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AUTOEXP_MATRIX_DIR": str(matrix)}
    script = [REPO / "scripts" / "check-airflow-matrix", "--venvs", "3.1-py3.10"]
    with (matrix / "airflow3.1-py3.10.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a build in progress holds it
        run = subprocess.Popen(script, env=env, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert run.poll() is None, run.communicate()[1]
    _, err = run.communicate(timeout=60)
    assert run.returncode == 1
    assert "3.1-py3.10: building" in err, err
    assert "no python3.10 found" in err, err
