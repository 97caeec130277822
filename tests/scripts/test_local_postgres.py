"""scripts/local-postgres: a private server comes up beside the session's, answers psql, goes away cleanly."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.postgres import SCRIPT, TestPostgres, run_script, start_server, stop_server
from tests.fixtures.procs import children, processes
from tests.fixtures.scripts import free_ports, parse_env


def test_status_and_down_of_a_folder_without_server(tmp_path: Path) -> None:
    status = subprocess.run([str(SCRIPT), "status", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert status.returncode == 3
    assert "no server in" in status.stderr
    down = subprocess.run([str(SCRIPT), "down", "--dir", str(tmp_path)], capture_output=True, text=True)
    assert down.returncode == 0
    assert "nothing running" in down.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="as a normal user the server runs as the caller")
def test_a_folder_the_postgres_user_cannot_enter_is_refused(tmp_path: Path) -> None:
    # pytest's tmp folders are 0700 and root's: initdb as `postgres` would fail with a vague message.
    proc = subprocess.run(
        [str(SCRIPT), "up", "--dir", str(tmp_path / "pg"), "--port", "1", "--no-install"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "user postgres cannot enter" in proc.stderr
    assert "chmod o+x" in proc.stderr


@pytest.fixture
def server() -> Iterator[TestPostgres]:
    """A second server beside the session's, in a folder of its own (o+x, as the script needs)."""
    folder = Path(tempfile.mkdtemp(prefix="autoexp-pg-test-"))
    folder.chmod(0o755)
    try:
        pg = start_server(folder / "pg")
        yield pg
        stop_server(pg)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _psql(env_text: str, sql: str) -> str:
    env = {**os.environ, **parse_env(env_text)}
    argv = ["psql", "-X", "-tA", "-c", sql]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_up_status_env_psql_down_leaves_nothing_behind(server: TestPostgres) -> None:
    base = server.base_dir
    pid = server.pid()
    assert pid is not None
    status = run_script("status", "--dir", str(base))
    assert status.startswith(f"postgres   running  pid {pid}, 127.0.0.1:{server.port}")
    if os.geteuid() == 0:  # postgres refuses root: the data belongs to the `postgres` system user
        assert (base / "data").owner() == "postgres"
    assert (base / "run" / f".s.PGSQL.{server.port}").is_socket()

    # `env` is all a plain psql needs, and names the database Airflow gets.
    env_text = run_script("env", "--dir", str(base))
    env = parse_env(env_text)
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == server.url("airflow")
    assert _psql(env_text, "SELECT current_user, current_database()") == "airflow|airflow"
    _psql(env_text, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
    other = run_script("env", "--dir", str(base), "--db", "other")
    assert parse_env(other)["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == server.url("other")

    # A second `up` is idempotent; one asking for another port is refused while it runs.
    run_script("up", "--dir", str(base))
    assert server.pid() == pid
    argv = [str(SCRIPT), "up", "--dir", str(base), "--port", str(free_ports(1)[0])]
    clash = subprocess.run(argv, capture_output=True, text=True)
    assert clash.returncode == 1
    assert "is running with other settings" in clash.stderr

    workers = children(pid)
    assert workers  # checkpointer, walwriter, ...
    run_script("down", "--dir", str(base))
    assert not (workers | {pid}) & set(processes())
    status_after = subprocess.run([str(SCRIPT), "status", "--dir", str(base)], capture_output=True, text=True)
    assert status_after.returncode == 3
    assert "stopped" in status_after.stdout

    # The data outlives the server: `up` again finds the table.
    run_script("up", "--dir", str(base))
    assert _psql(env_text, "SELECT x FROM kept") == "42"


def test_a_taken_port_fails_with_the_server_log(tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="autoexp-pg-test-"))
    folder.chmod(0o755)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [str(SCRIPT), "up", "--dir", str(folder / "pg"), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    try:
        assert proc.returncode == 1
        assert "the server did not start; last lines of" in proc.stderr
        assert "could not bind" in proc.stderr
    finally:
        run_script("down", "--dir", str(folder / "pg"))
        shutil.rmtree(folder, ignore_errors=True)
