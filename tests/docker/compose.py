"""Helpers for the compose tests: run docker-compose and read the Dockerfiles, no Docker engine needed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / ".env.example"
DOCKERFILES = (REPO / "docker" / "airflow" / "Dockerfile", REPO / "docker" / "slurm" / "Dockerfile")

# Environment names that would carry a secret; *_CMD / *_FILE name where one is read from instead.
SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|FERNET|TOKEN|PRIVATE|(^|_)KEY$", re.IGNORECASE)
# user:password@ inside a URL.
URL_CREDENTIALS = re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)


def tool(name: str) -> str:
    """Path of a CLI tool from the venv or PATH; a missing tool fails the test, never skips it."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} not found: scripts/bootstrap installs it (see docs/docker.md)")
    return found


def compose_config(env_file: Path = ENV_EXAMPLE) -> dict[str, Any]:
    """`docker-compose config` with only env_file's settings (a developer's own .env is ignored)."""
    proc = subprocess.run(
        [tool("docker-compose"), "--env-file", str(env_file), "-f", str(COMPOSE_FILE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
    )
    assert proc.returncode == 0, f"docker-compose config failed: {proc.stderr.strip()}"
    config: dict[str, Any] = yaml.safe_load(proc.stdout)
    return config


def secret_findings(config: Mapping[str, Any], raw_text: str) -> list[str]:
    """Every place a secret value is written: a non-empty secret-named variable or URL credentials."""
    findings = []
    for name, service in config.get("services", {}).items():
        env = service.get("environment") or {}
        if isinstance(env, list):  # the list form KEY=VALUE
            env = dict(item.partition("=")[::2] for item in env)
        for key, value in env.items():
            if SECRET_NAME.search(key) and not key.endswith(("_CMD", "_FILE")) and value not in (None, ""):
                findings.append(f"{name}: {key}")
    findings += [f"url credentials: {m.group(0)}" for m in URL_CREDENTIALS.finditer(raw_text)]
    return findings


def dockerfile_instructions(path: Path) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        logical += line.rstrip("\\").strip() + " "
        if not line.endswith("\\"):
            if logical.strip():
                word, _, rest = logical.strip().partition(" ")
                yield word.upper(), rest.strip()
            logical = ""
