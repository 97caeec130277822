"""`autoexp doctor` against the real local cluster over SSH: passes when all is right, and each provoked
fault (wrong account, missing partition, missing image, unwritable folder) is its own FAIL line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoexp.cli.main import main
from autoexp.config.builtins import tools_hash
from tests.fixtures.jump_host import JumpHost
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("doctor")
    text = (REPO / "config" / "demo.yaml").read_text()
    old = 'AUTOEXP_CHECKOUT: "{CONFIG_DIR}/.."'
    assert old in text
    path = base / "demo.yaml"
    path.write_text(text.replace(old, f'AUTOEXP_CHECKOUT: "{REPO}"'))
    return path


def doctor(
    capsys: pytest.CaptureFixture[str],
    config: Path,
    *fixes: str,
    campaign: str = "campaign",
    conn_id: str = "slurm_local",
) -> tuple[int, list[str]]:
    argv = ["doctor", str(config), "-f", f"DEMO_DIR={config.parent / campaign}"]
    for fix in fixes:
        argv += ["-f", fix]
    code = main([*argv, "--conn-id", conn_id])
    out, err = capsys.readouterr()
    assert err.endswith("checks passed\n"), err
    # Airflow's and paramiko's log lines may share stdout; the report's lines are the OK/FAIL ones.
    return code, [line for line in out.splitlines() if line.startswith(("OK   ", "FAIL "))]


def _line(lines: list[str], start: str) -> list[str]:
    return [line for line in lines if line.startswith(start)]


def test_all_right(slurm_cluster: LocalCluster, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = doctor(capsys, config)
    assert code == 0, lines
    assert all(line.startswith("OK ") for line in lines), lines
    names = [line.split(":", 1)[0].split(None, 1)[1] for line in lines]
    tools = config.parent / "campaign" / "tools"
    assert names == [
        "ssh",
        "slurm commands",
        "accounting",
        "job limits",
        f"sbatch --test-only {REPO}/include/sbatch/train_container_simple.sh",
        f"sbatch --test-only {REPO}/include/sbatch/convert_eval_checkpoint.sh",
        f"remote_dir {config.parent}/campaign/runs/demo_tiny_lr0.002_bs4/autoexp",
        f"TOOLS_ROOT {tools}",
        f"tools {tools}/{tools_hash()}",
    ]
    assert (tools / tools_hash() / "helpers" / "convert_helper.sh").is_file()  # staged by doctor


def test_wrong_account_and_missing_partition(
    slurm_cluster: LocalCluster, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = doctor(capsys, config, "ACCOUNT=nobodys_account")
    assert code == 1
    failed = _line(lines, "FAIL")
    assert len(failed) == 2, lines  # one per template, nothing else
    assert all("sbatch --test-only" in f and "Invalid account" in f for f in failed), failed
    code, lines = doctor(capsys, config, "PARTITION=no_such_partition")
    failed = _line(lines, "FAIL")
    assert code == 1
    assert len(failed) == 2, lines
    assert all("invalid partition" in f.lower() for f in failed), failed


def test_missing_image(slurm_cluster: LocalCluster, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = doctor(
        capsys, config, "CONTAINER_RUNTIME=apptainer", f"CONTAINER_IMAGE={config.parent}/missing.sif"
    )
    assert code == 1
    assert _line(lines, f"FAIL container image {config.parent}/missing.sif") == [
        f"FAIL container image {config.parent}/missing.sif: not found or not readable; "
        "set CONTAINER_IMAGE to an image file on the cluster"
    ]


def test_unwritable_folder(
    slurm_cluster: LocalCluster, config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tests run as root, whom permissions do not stop: a regular file where a folder must be does.
    blocker = config.parent / "not-a-folder"
    blocker.write_text("")
    code, lines = doctor(capsys, config, f"airflow.remote_dir={blocker}/stage")
    assert code == 1
    (failed,) = _line(lines, "FAIL")
    assert failed.startswith(f"FAIL remote_dir {blocker}/stage: not writable: mkdir: ")
    assert "Not a directory" in failed


def test_each_hop_through_a_jump_host(
    jump_host: JumpHost,
    config: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, lines = doctor(capsys, config, conn_id=jump_host.conn_id)
    assert code == 0, lines
    hops = f"jump host 127.0.0.1:{jump_host.port}, login host 127.0.0.1:{jump_host.cluster.ssh_port}"
    assert lines[0].startswith(f"OK   ssh: connected, host key checked on {hops}; certificate valid until ")
    known = tmp_path / "known_hosts"
    known.write_text(jump_host.cluster.known_hosts.read_text())  # the jump host's key left out
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{jump_host.conn_id.upper()}", jump_host.conn_json(known_hosts=str(known))
    )
    code, lines = doctor(capsys, config, conn_id=jump_host.conn_id)
    assert code == 1
    assert lines == [
        f"FAIL ssh: {jump_host.conn_id}: jump host 127.0.0.1:{jump_host.port}: host key not in known_hosts "
        f"({known}); check the connection's host, user, key and host key"
    ]
