"""scripts/demo stops Airflow by process group and parentage: a SIGKILLed triggerer's serve-logs too."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures.airflow_env import AIRFLOW, AirflowEnv
from tests.fixtures.procs import group_tree
from tests.fixtures.scripts import REPO, free_ports

DEMO = REPO / "scripts" / "demo"


def demo_function(*call: str) -> subprocess.CompletedProcess[str]:
    """Run one of scripts/demo's functions (the script returns after defining them when sourced)."""
    script = f"source {DEMO}; {' '.join(call)}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=True)


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def start_time(pid: int) -> str:
    return demo_function("start_time", str(pid)).stdout.strip()


def test_an_unrelated_process_with_the_recorded_pid_is_left_alone(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = tmp_path / "airflow.pgid"
        record.write_text(f"{proc.pid} 1\n")  # the leader "started" at another time: pid reused
        demo_function("stop_recorded_airflow", str(record))
        assert proc.poll() is None
        assert not record.exists()
        record.write_text(f"{proc.pid} {start_time(proc.pid)}\n")
        demo_function("stop_recorded_airflow", str(record))
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.airflow
def test_a_killed_triggerer_s_serve_logs_is_stopped_with_its_group(
    airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    (port,) = free_ports(1)
    env = airflow_env.env(AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=str(port))
    with (tmp_path / "triggerer.log").open("wb") as out:
        proc = subprocess.Popen(
            [AIRFLOW, "triggerer"], stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    record = tmp_path / "airflow.pgid"
    try:
        deadline = time.monotonic() + 120
        while not listening(port):
            assert proc.poll() is None, (tmp_path / "triggerer.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "serve-logs never listened"
            time.sleep(0.5)
        record.write_text(f"{proc.pid} {start_time(proc.pid)}\n")
        os.kill(proc.pid, signal.SIGKILL)  # a crash: the serve-logs child is left behind
        proc.wait(timeout=30)
        assert listening(port), "the orphaned serve-logs should still hold the port (the fault)"
        left = group_tree(proc.pid)
        assert left, "nothing left in the group"
        out = demo_function("stop_recorded_airflow", str(record))
        assert f"process group {proc.pid}" in out.stderr
        assert group_tree(proc.pid) == set()
        assert not listening(port)
    finally:
        subprocess.run(["bash", "-c", f"source {DEMO}; stop_airflow {proc.pid} 5"], check=False, timeout=60)
