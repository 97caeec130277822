"""Faults injected into the real local cluster while a task waits: daemons stopped and restarted by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tests.fixtures.slurm_cluster import LocalCluster


@dataclass(frozen=True)
class SqueueRow:
    job_id: str
    name: str
    state: str


def squeue(cluster: LocalCluster) -> list[SqueueRow]:
    """Every job slurmctld knows, read locally (not over SSH: the sshd may be the fault)."""
    out = subprocess.run(
        ["squeue", "-h", "-o", "%i|%j|%T"], capture_output=True, text=True, env=cluster.env(), timeout=30
    ).stdout
    return [SqueueRow(*line.split("|", 2)) for line in out.splitlines() if line.count("|") == 2]


def sacct_rows(cluster: LocalCluster, name_prefix: str) -> list[tuple[str, str, str]]:
    """(job id, name, state) of every job whose name starts with ``name_prefix``, from accounting."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-o", "JobID,JobName,State", "-S", "now-2hours"],
        capture_output=True,
        text=True,
        env=cluster.env(),
        check=True,
        timeout=30,
    ).stdout
    rows = [tuple(line.split("|", 2)) for line in out.splitlines() if line.count("|") == 2]
    return [(r[0], r[1], r[2]) for r in rows if r[1].startswith(name_prefix)]


def wait_job(cluster: LocalCluster, name_prefix: str, state: str, timeout: float = 60) -> SqueueRow:
    """Poll squeue until a job named ``name_prefix...`` is in ``state``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in squeue(cluster):
            if row.name.startswith(name_prefix) and row.state == state:
                return row
        time.sleep(0.2)
    raise AssertionError(f"no job {name_prefix}* in state {state} after {timeout} s: {squeue(cluster)}")


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def stop_daemons(cluster: LocalCluster, *daemons: str, timeout: float = 20) -> None:
    """SIGTERM the daemons (from their pid files; sshd with its per-connection children) and wait."""
    pids: list[int] = []
    for daemon in daemons:
        pid = cluster.pid(daemon)
        assert pid is not None, f"{daemon} is not running"
        # An sshd's open connections live in its children: without them the link would not drop.
        pids += [pid, *(_children(pid) if daemon == "sshd" else [])]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(cluster.pid(d) is not None for d in daemons):
        assert time.monotonic() < deadline, f"{daemons} did not stop"
        time.sleep(0.05)


@dataclass
class Fault:
    """A fault run in a thread while the task waits; ``error`` keeps what went wrong in it."""

    action: Callable[[], None]
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        try:
            self.action()
        except BaseException as exc:  # reported by the test thread in check()
            self.error = exc
        finally:
            self.done.set()

    def check(self) -> None:
        assert self.done.is_set(), "the fault never finished"
        if self.error is not None:
            raise AssertionError(f"fault injection failed: {self.error}") from self.error


@contextlib.contextmanager
def fault_in_background(action: Callable[[], None], cluster: LocalCluster) -> Iterator[Fault]:
    """Run ``action`` in a thread; on exit, wait for it, bring every daemon back, re-raise its error."""
    fault = Fault(action)
    thread = threading.Thread(target=fault.run, name="fault", daemon=True)
    thread.start()
    try:
        yield fault
    finally:
        thread.join(120)
        # Whatever happened, the session's cluster must be whole again for the next test.
        cluster.up()
    fault.check()
