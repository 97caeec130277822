"""A QOS/association job limit set with sacctmgr on the real local cluster (slurmdbd) is read by
`autoexp doctor`, which says whether the pool fits under it, and by `autoexp airflow-setup`, which
sizes the pool within it. Every limit is restored afterwards."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoexp.cli.main import main
from tests.e2e.campaign import reduced_config
from tests.fixtures.airflow_env import AirflowEnv
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = [pytest.mark.slurm, pytest.mark.airflow]

POOL = "limits_pool"


def _sacctmgr(cluster: LocalCluster, command: str) -> None:
    done = cluster.ssh(f"sacctmgr -i {command}")
    assert done.returncode == 0, done.stderr


@pytest.fixture
def limited(slurm_cluster: LocalCluster) -> Iterator[LocalCluster]:
    """MaxSubmitJobs=3 on the user's association, MaxJobsPerUser=2 on its QOS (normal); restored after."""
    where = f"user where name={slurm_cluster.ssh_user} account={slurm_cluster.account}"
    _sacctmgr(slurm_cluster, f"modify {where} set MaxSubmitJobs=3")
    _sacctmgr(slurm_cluster, "modify qos where name=normal set MaxJobsPerUser=2")
    try:
        yield slurm_cluster
    finally:
        _sacctmgr(slurm_cluster, f"modify {where} set MaxSubmitJobs=-1")
        _sacctmgr(slurm_cluster, "modify qos where name=normal set MaxJobsPerUser=-1")


def _doctor_limits(config: Path, capsys: pytest.CaptureFixture[str]) -> str:
    main(["doctor", str(config), "-f", f"DEMO_DIR={config.parent / 'campaign'}", "--conn-id", "slurm_local"])
    out = capsys.readouterr().out
    (line,) = [line for line in out.splitlines() if line.split(":")[0].endswith(" job limits")]
    return line


def test_doctor_and_setup_size_the_pool_within_the_limits(
    airflow_env: AirflowEnv,
    limited: LocalCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(limited.conn_env_var, limited.airflow_conn_json)
    config = reduced_config(tmp_path, ("  pool: slurm_local\n", f"  pool: {POOL}\n"))
    assocation = f"association {limited.account}"
    # The pool does not exist yet: airflow-setup would give it 8 slots, above the submit limit.
    assert _doctor_limits(config, capsys) == (
        f"FAIL job limits: pool {POOL} has 8 slots, above MaxSubmitJobs 3 ({assocation}): Slurm would "
        "refuse the submits above it; run `autoexp airflow-setup` with this config (it sizes the pool "
        "within) or --slots 3"
    )
    assert main(["airflow-setup", str(config)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"pool {POOL} created: 3 slots, deferred tasks counted (SSH slurm_local); "
        f"lowered from 8 to MaxSubmitJobs 3 ({assocation})"
    )
    assert _doctor_limits(config, capsys) == (
        f"OK   job limits: pool {POOL} (3 slots) fits; submit: MaxSubmitJobs 3 ({assocation}); "
        "running: MaxJobsPerUser 2 (QOS normal); at most 2 run at once, the others wait PENDING"
    )
    # Asked for more than the limit allows: still capped.
    assert main(["airflow-setup", str(config), "--slots", "50"]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .endswith(f"lowered from 50 to MaxSubmitJobs 3 ({assocation})")
    )


def test_setup_without_reachable_limits_says_why(
    airflow_env: AirflowEnv, slurm_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    conn = json.loads(slurm_cluster.airflow_conn_json)
    other_key = Path(f"{slurm_cluster.client_key}.pub").read_text().split()[:2]  # not the host's key
    conn["extra"]["host_key"] = " ".join(other_key)
    monkeypatch.setenv(slurm_cluster.conn_env_var, json.dumps(conn))
    config = reduced_config(tmp_path, ("  pool: slurm_local\n", "  pool: limits_unread\n"))
    assert main(["airflow-setup", str(config), "--slots", "5"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    assert line.startswith(
        "pool limits_unread created: 5 slots, deferred tasks counted (SSH slurm_local); job limits not read ("
    ), line
