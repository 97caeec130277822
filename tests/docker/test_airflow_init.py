"""docker/airflow/init.sh against a real Airflow metadata DB: connection and pool, idempotent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docker.compose import REPO
from tests.docker.test_docker_scripts import published_keys
from tests.fixtures.airflow_env import AirflowEnv

INIT = REPO / "docker" / "airflow" / "init.sh"

pytestmark = [pytest.mark.airflow, pytest.mark.slow]


def run_init(airflow_env: AirflowEnv, keys: Path) -> subprocess.CompletedProcess[str]:
    # The venv's bin first: init.sh calls `airflow` and `python` as the image's PATH provides them.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = airflow_env.env(
        PATH=path,
        AUTOEXP_SSH_KEY_DIR=str(keys),
        AUTOEXP_SSH_CONN_ID="compose_init_test",
        AUTOEXP_POOL="compose_init_pool",
        AUTOEXP_POOL_SLOTS="3",
    )
    return subprocess.run(["bash", str(INIT)], env=env, capture_output=True, text=True, timeout=300)


def test_init_creates_the_connection_and_pool_and_replaces_them_on_rerun(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    keys = published_keys(tmp_path / "keys")
    first = run_init(airflow_env, keys)
    assert first.returncode == 0, first.stderr[-3000:]
    # The slurm volume was recreated: a new host key must replace the stored one, not fail on "exists".
    (keys / "host_ed25519.pub").unlink()
    new_host = tmp_path / "new_host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(new_host)], check=True)
    (keys / "host_ed25519.pub").write_text(new_host.with_suffix(".pub").read_text())
    second = run_init(airflow_env, keys)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "pool compose_init_pool (3 slots), connection compose_init_test -> slurm:2222" in second.stdout

    (conn,) = json.loads(airflow_env.cli("connections", "get", "compose_init_test", "-o", "json"))
    assert (conn["conn_type"], conn["host"], int(conn["port"]), conn["login"]) == (
        "ssh",
        "slurm",
        2222,
        "root",
    )
    extra = conn["extra_dejson"]
    assert extra["host_key"] == " ".join(new_host.with_suffix(".pub").read_text().split()[:2])
    assert extra["key_file"] == str(keys / "id_ed25519")
    assert "no_host_key_check" not in extra
    (pool,) = json.loads(airflow_env.cli("pools", "get", "compose_init_pool", "-o", "json"))
    assert (pool["pool"], int(pool["slots"])) == ("compose_init_pool", 3)
    assert str(pool["include_deferred"]) == "True"  # the Slurm tasks wait deferred
