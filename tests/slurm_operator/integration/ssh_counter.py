"""A second sshd in front of the local cluster that logs every command it runs (and may fake some)."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.slurm_cluster import LocalCluster, free_ports

# sshd runs the ForceCommand instead of what the client asked for and hands the request over in
# SSH_ORIGINAL_COMMAND (an SFTP subsystem request arrives as the subsystem's command line). The
# wrapper appends one line per request: "<epoch seconds>\t<command, newlines folded>", written with
# a single printf so that concurrent sessions append whole lines.
_WRAPPER = """#!/bin/sh
cmd=$(printf '%s' "$SSH_ORIGINAL_COMMAND" | tr '\\n\\t' '  ')
printf '%s\\t%s\\n' "$(date +%s.%N)" "$cmd" >> {log}
{path}exec /bin/sh -c "$SSH_ORIGINAL_COMMAND"
"""


@dataclass(frozen=True)
class Command:
    """One request the counting sshd served."""

    at: float
    text: str


@dataclass
class CountingSshd:
    """An sshd on its own port, same machine, keys and SLURM_CONF as the cluster's, counting commands.

    ``conn_id``/``conn_json`` describe an Airflow SSH connection to it with host-key checking on.
    """

    base: Path
    port: int
    conn_id: str
    conn_json: str
    pid: int

    @property
    def conn_env_var(self) -> str:
        return f"AIRFLOW_CONN_{self.conn_id.upper()}"

    @property
    def log_path(self) -> Path:
        return self.base / "commands.log"

    def commands(self, since: float = 0.0, until: float = float("inf")) -> list[Command]:
        """Requests served in the wall-clock window [since, until)."""
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text().splitlines():
            at, _, text = line.partition("\t")
            if since <= float(at) < until:
                out.append(Command(float(at), text))
        return out

    def stop(self) -> None:
        """SIGTERM the listener and the sessions below it (by pid, never by name)."""
        for pid in [*_descendants(self.pid), self.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(self.pid):
            time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError):
            text = stat.read_text()
            parent[int(stat.parent.name)] = int(text[text.rindex(")") + 2 :].split()[1])
    out = []
    for pid in parent:
        p = parent.get(pid, 0)
        while p > 1:
            if p == root:
                out.append(pid)
                break
            p = parent.get(p, 0)
    return out


def start_counting_sshd(
    cluster: LocalCluster, base: Path, conn_id: str = "slurm_counted", fake_bin: Path | None = None
) -> CountingSshd:
    """Start the counting sshd in ``base`` (a fresh folder) and wait until it accepts connections.

    ``fake_bin``: a folder put first on the PATH of every request, so that its commands (a fake
    ``sacct``...) stand in for the real ones on this connection only.
    """
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o700)
    host_key = base / "host_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "counting-sshd", "-f", str(host_key)],
        check=True,
    )
    authorized = base / "authorized_keys"
    authorized.write_text(Path(f"{cluster.client_key}.pub").read_text())
    authorized.chmod(0o600)
    wrapper = base / "count-and-run"
    path = f"PATH={shlex.quote(str(fake_bin))}:$PATH; export PATH\n" if fake_bin is not None else ""
    wrapper.write_text(_WRAPPER.format(log=shlex.quote(str(base / "commands.log")), path=path))
    wrapper.chmod(0o755)
    (port,) = free_ports(1)
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {base / 'sshd.pid'}\n"
        f"AuthorizedKeysFile {authorized}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"SetEnv SLURM_CONF={cluster.slurm_conf}\nForceCommand {wrapper}\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    subprocess.run(["/usr/sbin/sshd", "-f", str(config), "-E", str(base / "sshd.log")], check=True)
    deadline = time.monotonic() + 10
    pid_file = base / "sshd.pid"
    # sshd creates its pid file and then writes it: an empty file was read once (fresh-clone run).
    while not (pid_file.exists() and pid_file.read_text().strip().isdigit()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"counting sshd did not start: {(base / 'sshd.log').read_text()[-2000:]}")
        time.sleep(0.05)
    conn = json.loads(cluster.airflow_conn_json)
    conn["port"] = port
    conn["extra"]["host_key"] = " ".join(Path(f"{host_key}.pub").read_text().split()[:2])
    return CountingSshd(base, port, conn_id, json.dumps(conn), int(pid_file.read_text()))


@contextlib.contextmanager
def counting_sshd(
    cluster: LocalCluster, base: Path, conn_id: str = "slurm_counted"
) -> Iterator[CountingSshd]:
    """Context manager form: the sshd and its sessions are stopped on exit."""
    sshd = start_counting_sshd(cluster, base, conn_id)
    try:
        yield sshd
    finally:
        sshd.stop()
