"""The demo's Airflow is login-protected and loopback-only, on a real stack under supervisord set up as
scripts/demo sets it up (scripts/lib/demo_login.py's password file, the simple auth manager with one
admin user, the supervisord config with ``--no-serve-logs``): no or a wrong password is refused, the
generated one is accepted; the file is mode 0600; every port the stack listens on is 127.0.0.1's.

The full demo (cluster, campaign) is not started: the stack is the e2e fixture's, with the demo's
login and supervisor settings.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.fixtures import session
from tests.fixtures.airflow_stack import AirflowStack
from tests.fixtures.scripts import REPO

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

LISTEN = "0A"  # /proc/net/tcp's state of a listening socket


def _demo_login() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_login", REPO / "scripts" / "lib" / "demo_login.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


login = _demo_login()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AirflowStack, Path]]:
    base = tmp_path_factory.mktemp("demo-login")
    passwords = base / "state" / "passwords.json"
    assert login.ensure_password(passwords)
    env = {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": login.USERS,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
    }
    (base / "dags").mkdir()
    url = session.server().create_database(f"stack_{session.WORKER}_demo_login_{os.getpid()}")
    stack = AirflowStack(
        home=base / "home",
        dags_folder=base / "dags",
        database_url=url,
        extra_env=env,
        supervised=True,
        serve_logs=False,
    )
    try:
        stack.start()
        yield stack, passwords
    finally:
        stack.stop()


def _post_token(port: int, body: bytes) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/auth/token",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _get(port: int, path: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_password_file_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "passwords.json"
    password = login.ensure_password(path)
    assert len(password) >= 24
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"admin": password}
    path.chmod(0o644)
    assert login.ensure_password(path) is None  # printed once: a second run keeps it, tightened
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"admin": password}


def test_no_or_a_wrong_password_is_refused_and_the_generated_one_accepted(
    demo: tuple[AirflowStack, Path],
) -> None:
    stack, passwords = demo
    assert stat.S_IMODE(passwords.stat().st_mode) == 0o600
    assert _get(stack.port, "/api/v2/dags") == 401
    # With every user admin, this hands out a token without credentials; with the login on it refuses.
    assert _get(stack.port, "/auth/token") == 403
    assert _post_token(stack.port, json.dumps({"username": "admin", "password": ""}).encode()) in (400, 401)
    assert _post_token(stack.port, json.dumps({"username": "admin", "password": "wrong"}).encode()) == 401
    token = login.token(stack.port, passwords, timeout=60)
    assert _get(stack.port, "/api/v2/dags", token) == 200


def _listening(pids: list[int]) -> dict[int, str]:
    """port -> local address (hex, as /proc/net/tcp{,6} write it) of the sockets ``pids`` listen on."""
    inodes: set[str] = set()
    for pid in pids:
        with_fds = Path(f"/proc/{pid}/fd")
        try:
            links = [os.readlink(fd) for fd in with_fds.iterdir()]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port = fields[1].split(":")
            if fields[3] == LISTEN and fields[9] in inodes:
                found[int(port, 16)] = address
    return found


def test_every_port_of_the_stack_is_loopback(demo: tuple[AirflowStack, Path]) -> None:
    stack, _ = demo
    ports = _listening(stack.group_pids())
    assert stack.port in ports
    loopback = {"0100007F", "00000000000000000000000001000000"}  # 127.0.0.1, ::1
    assert {p: a for p, a in ports.items() if a not in loopback} == {}
    # No log server: Airflow 3.3 binds it to every interface (no host setting).
    worker_logs, trigger_logs = (int(v) for v in (stack.env()[k] for k in LOG_PORTS))
    assert worker_logs not in ports
    assert trigger_logs not in ports


LOG_PORTS = ("AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT", "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT")


def test_the_demo_supervisor_config_starts_no_log_server(tmp_path: Path) -> None:
    from tests.fixtures.airflow_stack import supervisor_module

    text = supervisor_module().config(tmp_path, tmp_path, "/venv/bin/airflow", "/py", serve_logs=False)
    commands = {line for line in text.splitlines() if line.startswith("command=")}
    skipped = {c.split()[-2] for c in commands if c.endswith(" --skip-serve-logs")}
    assert skipped == {"scheduler", "triggerer"}
    assert len(commands) == 4
