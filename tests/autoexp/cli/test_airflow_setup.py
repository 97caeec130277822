"""`autoexp airflow-setup`: the config's pool created counting deferred tasks, its SSH connection checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoexp.cli.main import main
from tests.e2e.campaign import reduced_config
from tests.fixtures.airflow_env import AirflowEnv
from tests.fixtures.scripts import free_ports

pytestmark = [pytest.mark.airflow]


def _config(tmp_path: Path, pool: str) -> Path:
    return reduced_config(tmp_path, ("  pool: slurm_local\n", f"  pool: {pool}\n"))


def _pool(pool: str) -> tuple[int, bool] | None:
    from airflow.models.pool import Pool  # the database itself, not autoexp's reading of the CLI

    found = Pool.get_pool(pool)
    return None if found is None else (found.slots, found.include_deferred)


def test_setup_creates_the_pool_with_deferred_tasks_counted(
    airflow_env: AirflowEnv,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Nothing listens there: the job limits cannot be read, the pool is made all the same.
    (port,) = free_ports(1)
    conn = {"conn_type": "ssh", "host": "127.0.0.1", "port": port}
    monkeypatch.setenv("AIRFLOW_CONN_SLURM_LOCAL", json.dumps(conn))
    config = _config(tmp_path, "setup_pool")
    assert main(["airflow-setup", str(config)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "pool setup_pool created: 8 slots, deferred tasks counted (SSH slurm_local); job limits not read ("
    ), out
    assert "connection refused" in out
    assert _pool("setup_pool") == (8, True)
    # A second run keeps the slots the user chose, unless told otherwise.
    assert main(["airflow-setup", str(config), "--slots", "3"]) == 0
    assert main(["airflow-setup", str(config)]) == 0
    assert (
        "pool setup_pool updated: 3 slots, deferred tasks counted (SSH slurm_local); "
        in (capsys.readouterr().out.splitlines()[-1])
    )
    assert _pool("setup_pool") == (3, True)


def test_setup_refuses_a_missing_ssh_connection(
    airflow_env: AirflowEnv,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_SLURM_LOCAL", raising=False)
    config = _config(tmp_path, "setup_missing_conn")
    assert main(["airflow-setup", str(config)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"{config}: SSH connection 'slurm_local' does not exist; create it first "
        "(airflow connections add, see docs/dag-factory.md)\n"
    )
    assert _pool("setup_missing_conn") is None


def test_setup_reports_a_broken_config_in_one_line(
    airflow_env: AirflowEnv, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = reduced_config(tmp_path, ("  retries: 1\n", "  retries: many\n"))
    assert main(["airflow-setup", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{config}:")
    assert "airflow.retries: expected int, got 'many'" in err
    assert err.count("\n") == 1
