"""Generate the compose stack's secrets once into a volume and hand shared volumes to Airflow's uid."""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
from pathlib import Path

# These are file names, not secrets (hence the S105 waivers).
POSTGRES_PASSWORD = "postgres_password"  # noqa: S105
SQL_ALCHEMY_CONN = "sql_alchemy_conn"
FERNET_KEY = "fernet_key"
JWT_SECRET = "jwt_secret"  # noqa: S105
API_SECRET_KEY = "api_secret_key"  # noqa: S105
# SimpleAuthManager opens this file for appending, so it is writable by its owner.
PASSWORDS_FILE = "simple_auth_manager_passwords.json"
ADMIN_USER = "admin"


def _write(path: Path, text: str, mode: int, owner: int | None) -> None:
    """Write atomically with its final mode; values never end in a newline (read by `cat` in *_CMD)."""
    tmp = path.with_name("." + path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as stream:
        stream.write(text)
    os.chmod(tmp, mode)
    if owner is not None:
        os.chown(tmp, owner, 0)
    tmp.replace(path)


def _ensure(path: Path, make: str, mode: int, owner: int | None, created: list[str]) -> str:
    if path.exists():
        return path.read_text()
    _write(path, make, mode, owner)
    created.append(path.name)
    return make


def make_secrets(folder: Path, owner: int | None, admin_password: str, db_host: str) -> list[str]:
    """Create every missing secret in ``folder``; returns the names of the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    # Traversable by postgres's uid, which reads postgres_password; each file keeps its own mode.
    os.chmod(folder, 0o755)  # noqa: S103
    created: list[str] = []
    token = secrets.token_urlsafe
    # Postgres reads its password as the image's own postgres user, whose uid we do not control: that
    # one file is world-readable, inside a volume only the postgres and Airflow containers mount.
    pg_password = _ensure(folder / POSTGRES_PASSWORD, token(24), 0o444, owner, created)
    # token_urlsafe's alphabet needs no URL quoting in the connection string.
    conn = f"postgresql+psycopg2://airflow:{pg_password}@{db_host}:5432/airflow"
    _ensure(folder / SQL_ALCHEMY_CONN, conn, 0o400, owner, created)
    _ensure(folder / FERNET_KEY, base64.urlsafe_b64encode(os.urandom(32)).decode(), 0o400, owner, created)
    _ensure(folder / JWT_SECRET, token(32), 0o400, owner, created)
    _ensure(folder / API_SECRET_KEY, token(32), 0o400, owner, created)
    passwords_path = folder / PASSWORDS_FILE
    if admin_password or not passwords_path.exists():
        # A password from .env wins on every start, so changing it there and restarting applies it.
        password = admin_password or token(12)
        _write(passwords_path, json.dumps({ADMIN_USER: password}), 0o600, owner)
        created.append(PASSWORDS_FILE)
    return created


def hand_over(folders: list[Path], owner: int | None) -> None:
    """Make fresh named volumes (root-owned when Docker creates them) writable for Airflow's uid."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        if owner is not None:
            os.chown(folder, owner, 0)
        # Group 0 writable: the official image runs any uid with gid 0.
        os.chmod(folder, 0o775)  # noqa: S103


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path, help="secrets folder (a volume)")
    parser.add_argument("--owner-uid", type=int, default=None, help="uid that owns the files (needs root)")
    parser.add_argument("--db-host", default="postgres", help="Postgres host in the connection string")
    parser.add_argument("--chown", type=Path, action="append", default=[], help="folder to hand over")
    args = parser.parse_args(argv)
    try:
        created = make_secrets(
            args.folder, args.owner_uid, os.environ.get("AIRFLOW_ADMIN_PASSWORD", ""), args.db_host
        )
        hand_over(args.chown, args.owner_uid)
    except OSError as exc:
        print(f"make_secrets: {exc.filename or args.folder}: {exc.strerror}", file=sys.stderr)
        return 1
    # Names only: the values stay out of the logs.
    print(
        f"make_secrets: {args.folder}: created {', '.join(created) if created else 'nothing (all present)'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
