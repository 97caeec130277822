"""The demo's Airflow login (scripts/demo runs it): one generated admin password, stored once.

    demo_login.py password --file F   # creates F (mode 0600) and prints the new password; prints
                                      # nothing when F exists (its mode is set to 0600 again)
    demo_login.py token --port P --file F [--timeout S]   # waits for the api-server, prints a JWT

F is the simple auth manager's passwords file (``{"admin": PASSWORD}``), which Airflow reads through
``[core] simple_auth_manager_passwords_file``; the user list is ``admin:admin``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

USER = "admin"
USERS = f"{USER}:admin"  # [core] simple_auth_manager_users: the one user and its role
MODE = 0o600


def ensure_password(path: Path) -> str | None:
    """Create ``path`` with a new password (mode 0600 from its first byte) and return it; None when
    it already exists (its mode is tightened to 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MODE)
    except FileExistsError:
        path.chmod(MODE)
        return None
    with os.fdopen(fd, "w") as out:
        json.dump({USER: password}, out)
    return password


def token(port: int, path: Path, timeout: float) -> str:
    """A JWT for the admin user from ``POST /auth/token``, once the api-server answers (bounded)."""
    password = json.loads(path.read_text())[USER]
    body = json.dumps({"username": USER, "password": password}).encode()
    url = f"http://127.0.0.1:{port}/auth/token"
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(
            url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
                return str(json.loads(answer.read())["access_token"])
        except (OSError, ValueError, KeyError) as exc:
            if isinstance(exc, urllib.error.HTTPError) and exc.code in (401, 403):
                raise SystemExit(f"demo_login: {url} refused the password in {path}") from None
            if time.monotonic() > deadline:
                raise SystemExit(f"demo_login: no token from {url} within {timeout:.0f} s: {exc}") from None
            time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    new = sub.add_parser("password", help="create the passwords file; print a new password")
    new.add_argument("--file", type=Path, required=True)
    tok = sub.add_parser("token", help="print a JWT of the admin user")
    tok.add_argument("--file", type=Path, required=True)
    tok.add_argument("--port", type=int, required=True)
    tok.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args(argv)
    if args.verb == "password":
        print(ensure_password(args.file) or "")
    else:
        print(token(args.port, args.file, args.timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
