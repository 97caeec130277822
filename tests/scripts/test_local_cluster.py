"""scripts/local-cluster: a second, private cluster comes up beside the session's and goes away cleanly."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.slurm_cluster import SCRIPT, LocalCluster, start_cluster, stop_cluster


@pytest.mark.slurm
def test_up_status_env_down_leaves_nothing_behind() -> None:
    # A second cluster beside the session's (when that one runs): proves folders and ports isolate them.
    cluster = start_cluster(prefix="autoexp-second-")
    try:
        pids = cluster.pids()
        assert sorted(pids) == sorted(["sshd", "slurmd", "slurmctld", "slurmdbd", "mysqld", "munged"])
        assert "idle (8 CPUs)" in cluster.status()
        cluster.up()  # idempotent: nothing restarted
        assert cluster.pids() == pids

        # Strict host-key checking against the generated key; SLURM_CONF comes from sshd's SetEnv.
        out = cluster.ssh("sinfo -h -o '%P %D %c'; sacctmgr -n -P show account format=Account")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[:2] == ["batch* 1 8", "booster 1 8"]
        assert cluster.account in out.stdout.split()

        assert cluster.host_public_key.startswith("ssh-ed25519 ")
        extra = cluster.connection_extra()
        assert extra["host_key"] == cluster.host_public_key
        assert "no_host_key_check" not in extra

        # A job still running at `down` is cancelled, and an open SSH session is closed with its command.
        job = cluster.ssh(f"sbatch --parsable -o {cluster.jobs_dir}/%j.out --wrap 'sleep 300'")
        assert job.stdout.strip().isdigit(), job.stderr
        session = subprocess.Popen(cluster.ssh_argv("sleep 300"), stdin=subprocess.DEVNULL)
    except BaseException:
        stop_cluster(cluster)
        raise
    try:
        stop_cluster(cluster)  # raises if a daemon survived
        assert session.wait(timeout=10) != 0
    finally:
        if session.poll() is None:
            session.kill()
    assert cluster.pids() == {}
    assert not cluster.base_dir.exists()
    leftovers = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    assert str(cluster.base_dir) not in leftovers
    status = [str(SCRIPT), "status", "--dir", str(cluster.base_dir)]
    proc = subprocess.run(status, capture_output=True, text=True)
    assert proc.returncode == 3
    assert "no cluster in" in proc.stderr
    assert not cluster.base_dir.exists()


def test_munge_folder_permissions_are_checked(tmp_path: Path) -> None:
    # pytest's tmp folders are 0700: munged would refuse them with a message about "/tmp/pytest-of-...".
    proc = subprocess.run(
        [str(SCRIPT), "up", "--dir", str(tmp_path / "c"), "--port-base", "1"], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert "munged needs o+x on every folder above its socket" in proc.stderr


@pytest.mark.slurm
def test_session_cluster_is_wired_for_airflow(slurm_cluster: LocalCluster) -> None:
    assert os.environ[slurm_cluster.conn_env_var] == slurm_cluster.airflow_conn_json
    assert slurm_cluster.env()["SLURM_CONF"] == str(slurm_cluster.slurm_conf)
    out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, env=slurm_cluster.env())
    assert out.stdout.split() == ["batch*", "booster"]
