"""Airflow pools read and set through Airflow's own `airflow pools` CLI.

Airflow has no public Python API for pools; its CLI is public on every supported version, and
reaches the same metadata database (and secrets) as the process that runs it, so the setup and the
doctor need no private model.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass

_RAISED = re.compile(r"^[\w.]*(Error|Exception)\w*: ")
_LIMIT_S = 300  # one CLI start: a few seconds; minutes only while the database is migrating or busy


class PoolCliError(Exception):
    """`airflow pools` failed: one line with the command and the end of what it printed."""


@dataclass(frozen=True)
class Pool:
    slots: int
    include_deferred: bool


def _airflow(*args: str) -> str:
    command = [sys.executable, "-m", "airflow", "pools", *args]
    shown = f"airflow pools {args[0]}"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_LIMIT_S, check=False)
    except subprocess.TimeoutExpired:
        raise PoolCliError(f"`{shown}` did not answer in {_LIMIT_S} s; check the metadata database") from None
    if done.returncode != 0:
        raise PoolCliError(f"`{shown}` failed (exit {done.returncode}): {_cause(done.stderr or done.stdout)}")
    return done.stdout


def _cause(output: str) -> str:
    """The line that says why: a traceback's last exception line, else the last line printed."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    raised = [line for line in lines if _RAISED.match(line)]
    return (raised or lines or ["no output"])[-1]


def pools() -> dict[str, Pool]:
    """Every pool by name (raises PoolCliError when Airflow cannot be asked)."""
    out = _airflow("list", "-o", "json")
    rows = json.loads(next((line for line in out.splitlines() if line.startswith("[")), "[]"))
    return {
        str(row["pool"]): Pool(int(row["slots"]), str(row.get("include_deferred")).lower() == "true")
        for row in rows
    }


def set_pool(name: str, slots: int, description: str) -> None:
    """Create or update a pool that counts deferred tasks."""
    _airflow("set", name, str(slots), description, "--include-deferred")
