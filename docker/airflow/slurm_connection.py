"""Print the Airflow SSH connection (JSON) to the compose slurm service from its published keys."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Key types the SSH provider accepts in the `host_key` extra (it rejects DSS).
HOST_KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
)


class KeyDirError(Exception):
    """The published key folder is incomplete or malformed; the message names the file."""


def _read(path: Path) -> str:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        raise KeyDirError(f"{path}: missing (has the slurm service published its keys?)") from None
    if not text:
        raise KeyDirError(f"{path}: empty")
    return text


def connection(key_dir: Path, host: str, port: int, cmd_timeout: int = 60) -> dict[str, object]:
    """The connection for ``airflow connections add --conn-json``; host-key checking stays on."""
    key_file = key_dir / "id_ed25519"
    if not key_file.is_file():
        raise KeyDirError(f"{key_file}: missing (has the slurm service published its keys?)")
    host_key_line = _read(key_dir / "host_ed25519.pub").split()
    if len(host_key_line) < 2 or host_key_line[0] not in HOST_KEY_TYPES:
        raise KeyDirError(f"{key_dir / 'host_ed25519.pub'}: not an OpenSSH public key line")
    return {
        "conn_type": "ssh",
        "host": host,
        "port": port,
        "login": _read(key_dir / "user"),
        "extra": {
            # A path, not the key itself: the private key never enters Airflow's database.
            "key_file": str(key_file),
            # `host_key` makes the SSH provider verify the server; no_host_key_check stays unset.
            "host_key": " ".join(host_key_line[:2]),
            "look_for_keys": False,
            "conn_timeout": 10,
            "cmd_timeout": cmd_timeout,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--key-dir", type=Path, required=True, help="folder with id_ed25519, host_ed25519.pub, user"
    )
    parser.add_argument("--host", default="slurm")
    parser.add_argument("--port", type=int, default=2222)
    parser.add_argument("--cmd-timeout", type=int, default=60)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(connection(args.key_dir, args.host, args.port, args.cmd_timeout)))
    except KeyDirError as exc:
        print(f"slurm_connection: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
