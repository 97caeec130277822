"""Pools through `airflow pools`: what a failed CLI call reports (the round trip is test_airflow_setup's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoexp.campaign.preflight.job_limits import DEFAULT_POOL_SLOTS
from autoexp.cli import pools
from autoexp.cli.doctor import pool_slots
from tests.e2e.campaign import reduced_config


@pytest.fixture
def no_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A metadata database nothing listens for (port 9, discard: refused at once)."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql+psycopg2://u:secret@127.0.0.1:9/x")


def test_an_unreachable_database_is_one_line_naming_the_command_and_the_cause(no_database: None) -> None:
    with pytest.raises(pools.PoolCliError) as raised:
        pools.pools()
    message = str(raised.value)
    assert message.startswith("`airflow pools list` failed (exit 1): "), message
    assert "OperationalError" in message, message
    assert "Connection refused" in message, message
    assert "\n" not in message
    assert "secret" not in message


def test_doctor_sizes_the_pool_as_setup_would_when_airflow_cannot_be_asked(no_database: None) -> None:
    assert pool_slots("any_pool") == DEFAULT_POOL_SLOTS


def test_a_pool_is_set_counting_deferred_tasks_and_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against Airflow's CLI of the installed version (so the matrix checks 3.1 and 3.2 as well), on a
    throw-away SQLite database: one CLI process at a time, no daemon writes to it."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", f"sqlite:///{tmp_path / 'airflow.db'}")
    migrate = [sys.executable, "-m", "airflow", "db", "migrate"]
    subprocess.run(migrate, check=True, capture_output=True, timeout=600)
    assert "campaign" not in pools.pools()
    pools.set_pool("campaign", 3, "autoexp: Slurm jobs over c")
    pools.set_pool("campaign", 5, "autoexp: Slurm jobs over c")  # an update, not a second pool
    found = pools.pools()
    assert found["campaign"] == pools.Pool(slots=5, include_deferred=True)
    assert found["default_pool"].include_deferred is False


def test_airflow_setup_says_in_one_line_that_the_pools_could_not_be_read(
    no_database: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In its own process, as a user runs it (Airflow loaded here with this test's database URL
    would keep it for the rest of the worker)."""
    # The connection comes from the environment (found before the database is asked).
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_LOCAL", json.dumps({"conn_type": "ssh", "host": "127.0.0.1"}))
    command = [str(Path(sys.executable).with_name("autoexp")), "airflow-setup", str(reduced_config(tmp_path))]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 2, done.stderr
    # (Airflow 3.1 itself logs to stderr when the config is loaded: ours is the last line.)
    last = done.stderr.splitlines()[-1]
    assert last.startswith("`airflow pools list` failed (exit 1): sqlalchemy.exc.OperationalError: "), last
