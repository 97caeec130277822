"""The compose stack's helper scripts: secrets generation, the SSH connection builder, linters."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from tests.docker.compose import DOCKERFILES, REPO, compose_config, tool

MAKE_SECRETS = REPO / "docker" / "airflow" / "make_secrets.py"
SLURM_CONNECTION = REPO / "docker" / "airflow" / "slurm_connection.py"
SHELL_SCRIPTS = sorted((REPO / "docker").rglob("*.sh"))


def run(*argv: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in argv], capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL
    )


def make_secrets(folder: Path, *extra: str, admin_password: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOW_ADMIN_PASSWORD": admin_password}
    return run(sys.executable, MAKE_SECRETS, folder, *extra, env=env)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_passes_hadolint(dockerfile: Path) -> None:
    proc = run(tool("hadolint"), "--no-color", dockerfile)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shell_scripts_pass_shellcheck() -> None:
    assert len(SHELL_SCRIPTS) >= 3
    proc = run(tool("shellcheck"), *SHELL_SCRIPTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_secrets_are_generated_once_with_tight_modes(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    first = make_secrets(folder, "--chown", str(tmp_path / "logs"))
    assert first.returncode == 0, first.stderr
    values = {p.name: p.read_text() for p in folder.iterdir()}
    assert set(values) == {
        "postgres_password",
        "sql_alchemy_conn",
        "fernet_key",
        "jwt_secret",
        "api_secret_key",
        "simple_auth_manager_passwords.json",
    }
    # Names only in the output: no generated value is logged.
    assert not any(value in first.stdout for value in values.values())
    Fernet(values["fernet_key"].encode())  # raises on a malformed key
    assert values["sql_alchemy_conn"] == (
        f"postgresql+psycopg2://airflow:{values['postgres_password']}@postgres:5432/airflow"
    )
    assert not any(value.endswith("\n") for value in values.values())
    assert len(values["jwt_secret"]) >= 40
    admin = json.loads(values["simple_auth_manager_passwords.json"])["admin"]
    assert len(admin) >= 16
    assert mode(folder / "postgres_password") == 0o444
    assert mode(folder / "fernet_key") == 0o400
    assert mode(folder / "simple_auth_manager_passwords.json") == 0o600
    assert mode(tmp_path / "logs") == 0o775

    again = make_secrets(folder)
    assert again.returncode == 0, again.stderr
    assert "nothing (all present)" in again.stdout
    assert {p.name: p.read_text() for p in folder.iterdir()} == values


def test_admin_password_from_env_is_applied_on_every_start(tmp_path: Path) -> None:
    folder = tmp_path / "secrets"
    assert make_secrets(folder).returncode == 0
    chosen = make_secrets(folder, admin_password="correct-horse")
    assert chosen.returncode == 0, chosen.stderr
    assert "correct-horse" not in chosen.stdout
    assert json.loads((folder / "simple_auth_manager_passwords.json").read_text()) == {
        "admin": "correct-horse"
    }


def test_secrets_folder_that_is_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    blocker = tmp_path / "secrets"
    blocker.write_text("not a folder")
    proc = make_secrets(blocker)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"make_secrets: {blocker}")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_compose_secret_commands_resolve_in_airflow(tmp_path: Path) -> None:
    """The *_CMD variables of the compose file, pointed at generated files, give Airflow its values."""
    folder = tmp_path / "secrets"
    assert make_secrets(folder).returncode == 0
    compose_env = compose_config()["services"]["airflow-scheduler"]["environment"]
    env = {
        k: v.replace("/opt/airflow/secrets", str(folder))
        for k, v in compose_env.items()
        if k.endswith("_CMD")
    }
    # The database URL too: importing Airflow builds its engines from it (psycopg2 and asyncpg are
    # in this venv as in the image) without connecting, so the compose host `postgres` need not exist.
    env |= {"AIRFLOW_HOME": str(tmp_path / "home"), "PATH": os.environ["PATH"]}
    code = (
        "from airflow.configuration import conf\n"
        "print(conf.get('core', 'fernet_key'), conf.get('api_auth', 'jwt_secret'),"
        " conf.get('api', 'secret_key'), conf.get('database', 'sql_alchemy_conn'))"
    )
    proc = run(sys.executable, "-c", code, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = ("fernet_key", "jwt_secret", "api_secret_key", "sql_alchemy_conn")
    expected = " ".join((folder / n).read_text() for n in names)
    assert proc.stdout.strip().splitlines()[-1] == expected


def published_keys(folder: Path) -> Path:
    """A key folder laid out like the slurm entrypoint publishes it (real keys from ssh-keygen)."""
    folder.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / "id_ed25519")], check=True
    )
    host = folder / "host"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "host", "-f", str(host)], check=True)
    (folder / "host_ed25519.pub").write_text(host.with_suffix(".pub").read_text())
    (folder / "user").write_text("root\n")
    return folder


def test_connection_checks_the_host_key_and_uses_the_key_file(tmp_path: Path) -> None:
    keys = published_keys(tmp_path / "keys")
    proc = run(sys.executable, SLURM_CONNECTION, "--key-dir", keys, "--host", "slurm", "--port", "2222")
    assert proc.returncode == 0, proc.stderr
    conn = json.loads(proc.stdout)
    host_key = " ".join((keys / "host_ed25519.pub").read_text().split()[:2])
    assert conn == {
        "conn_type": "ssh",
        "host": "slurm",
        "port": 2222,
        "login": "root",
        "extra": {
            "key_file": str(keys / "id_ed25519"),
            "host_key": host_key,
            "look_for_keys": False,
            "conn_timeout": 10,
            "cmd_timeout": 60,
        },
    }
    # The private key itself never appears in the connection.
    assert (keys / "id_ed25519").read_text().strip() not in proc.stdout


def test_connection_without_published_keys_names_the_missing_file(tmp_path: Path) -> None:
    keys = published_keys(tmp_path / "keys")
    (keys / "host_ed25519.pub").unlink()
    proc = run(sys.executable, SLURM_CONNECTION, "--key-dir", keys)
    assert proc.returncode == 1
    missing = keys / "host_ed25519.pub"
    assert (
        proc.stderr.strip()
        == f"slurm_connection: {missing}: missing (has the slurm service published its keys?)"
    )


def test_connection_rejects_a_malformed_host_key(tmp_path: Path) -> None:
    keys = published_keys(tmp_path / "keys")
    (keys / "host_ed25519.pub").write_text("not-a-key\n")
    proc = run(sys.executable, SLURM_CONNECTION, "--key-dir", keys)
    assert proc.returncode == 1
    assert "not an OpenSSH public key line" in proc.stderr
