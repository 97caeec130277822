"""The slurm image's entrypoint and health check, run outside Docker against a real local cluster."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker.compose import REPO
from tests.fixtures.slurm_cluster import DAEMONS, free_ports

ENTRYPOINT = REPO / "docker" / "slurm" / "entrypoint.sh"
HEALTHCHECK = REPO / "docker" / "slurm" / "healthcheck.sh"
SLURM_CONNECTION = REPO / "docker" / "airflow" / "slurm_connection.py"

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


class Entrypoint:
    """One run of entrypoint.sh in its own process group, with the image's variables pointed at tmp."""

    def __init__(self, base: Path, share: Path, ports: list[int], forward_port: int) -> None:
        ctld, slurmd, dbd, db, ssh = ports
        self.env = {
            **os.environ,
            "AUTOEXP_REPO": str(REPO),
            "AUTOEXP_CLUSTER_DIR": str(base),
            "AUTOEXP_SSH_SHARE": str(share),
            "AUTOEXP_SSH_FORWARD_PORT": str(forward_port),
            "AIRFLOW_UID": str(os.getuid()),
            "AUTOEXP_CLUSTER_CHECK_SECS": "1",
            # No demo data here: that step is the toolchain's, tested there.
            "AUTOEXP_DEMO_DIR": "",
            "AUTOEXP_CLUSTER_UP_ARGS": f"--ctld-port {ctld} --slurmd-port {slurmd} --dbd-port {dbd} "
            f"--db-port {db} --ssh-port {ssh}",
        }
        self.base = base
        self.log = base.parent / "entrypoint.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(ENTRYPOINT)],
                env=self.env,
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def healthy(self) -> bool:
        return (
            subprocess.run([str(HEALTHCHECK)], env=self.env, capture_output=True, timeout=30).returncode == 0
        )

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"entrypoint exited {self.proc.returncode}: {self.log.read_text()[-3000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"not healthy after {timeout} s: {self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def daemon_pids(self) -> dict[str, int]:
        pids = {}
        for daemon in DAEMONS:
            pid_file = self.base / ("munge" if daemon == "munged" else "run") / f"{daemon}.pid"
            if pid_file.exists():
                pids[daemon] = int(pid_file.read_text())
        return pids

    def stop(self) -> int:
        """SIGTERM as `docker stop` sends it; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=90)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        subprocess.run(
            [str(REPO / "scripts" / "local-cluster"), "down", "--dir", str(self.base)], timeout=120
        )


def alive(pid: int, group: bool = False) -> bool:
    """Whether the process (or, with group, any process of the group led by pid) still exists."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def workdir() -> Iterator[Path]:
    # Under /tmp with o+x, like the session fixture: munged needs it on every folder above its socket.
    path = Path(tempfile.mkdtemp(prefix="autoexp-compose-"))
    path.chmod(0o755)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


def ssh_through_airflow(conn_json: str, command: str) -> tuple[int, str, str]:
    """Run command with the SSH provider's hook over the connection exactly as airflow-init stores it."""
    code = (
        "import sys\n"
        "from airflow.providers.ssh.hooks.ssh import SSHHook\n"
        "hook = SSHHook(ssh_conn_id='compose_slurm')\n"
        "with hook.get_conn() as client:\n"
        "    rc, out, err = hook.exec_ssh_client_command(\n"
        "        client, sys.argv[1], get_pty=False, environment=None)\n"
        "print(rc); print(out.decode().strip())\n"
    )
    env = {**os.environ, "AIRFLOW_CONN_COMPOSE_SLURM": conn_json}
    proc = subprocess.run(
        [sys.executable, "-c", code, command], env=env, capture_output=True, text=True, timeout=120
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or len(lines) < 2:
        return proc.returncode or 1, "", proc.stderr
    return int(lines[-2]), lines[-1], proc.stderr


def test_entrypoint_lifecycle_as_in_the_container(workdir: Path) -> None:
    """Up, keys published, SSH through the forward with host-key checking, clean stop, then a restart
    over the same state with a stale pid file (one cluster bring-up less than two separate tests)."""
    base, share = workdir / "cluster", workdir / "share"
    ports = free_ports(6)
    forward = ports.pop()
    run = Entrypoint(base, share, ports, forward)
    try:
        run.wait_healthy()
        key = share / "id_ed25519"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
        assert key.stat().st_uid == os.getuid()
        assert (share / "user").read_text().strip() == "root"

        # The connection airflow-init would create, aimed at the forwarded port as `slurm:2222` is.
        proc = subprocess.run(
            [
                sys.executable,
                str(SLURM_CONNECTION),
                "--key-dir",
                str(share),
                "--host",
                "127.0.0.1",
                "--port",
                str(forward),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rc, out, err = ssh_through_airflow(proc.stdout, "sinfo -h -o %P | sort | tr '\\n' ' '")
        assert (rc, out) == (0, "batch* booster"), err[-2000:]

        # Host-key checking is on: the same connection with another host key is refused.
        conn = json.loads(proc.stdout)
        other = workdir / "other"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
        conn["extra"]["host_key"] = " ".join(other.with_suffix(".pub").read_text().split()[:2])
        rc, _, err = ssh_through_airflow(json.dumps(conn), "true")
        assert rc != 0
        assert "host key" in err.lower(), err[-2000:]

        pids = run.daemon_pids()
        assert set(pids) == set(DAEMONS)
        assert run.stop() == 0
        assert [d for d, p in pids.items() if alive(p)] == []
        # socat, tail and sleep went with it: nothing is left in the entrypoint's process group.
        assert not alive(run.proc.pid, group=True)
    finally:
        run.kill()

    # A new container reuses small pids: here the pid file names a live process that is not sshd.
    decoy = subprocess.Popen(["sleep", "300"])
    (base / "run" / "sshd.pid").write_text(f"{decoy.pid}\n")
    again = Entrypoint(base, share, ports, forward)
    try:
        again.wait_healthy()
        sshd = int((base / "run" / "sshd.pid").read_text())
        assert Path(f"/proc/{sshd}/comm").read_text().strip() == "sshd"
        assert "removing stale pid file" in again.log.read_text()
        assert again.stop() == 0
        assert decoy.poll() is None, "down must not kill the process a stale pid file named"
    finally:
        again.kill()
        decoy.kill()
        decoy.wait()
