"""What a config file is made of besides its text: the environment variables it reads, and its hash.

The DAG processor plans a config and a worker renders its scripts later, in another process that may
have another environment; both must see the same file and the same ``${oc.env:...}`` values, or the
scripts would write where the DAG's waits do not look.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

CONFIGS_ENV = "AUTOEXP_CONFIGS"
_ENV_REF = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)")


class ConfigDriftError(ValueError):
    """The config a worker sees is not the one its DAG was planned from; ``str()`` is one line."""


def config_hash(path: Path) -> str:
    """Short content hash of a config file: shown in doc_md, checked again when the run stages."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def env_names(text: bytes | str) -> list[str]:
    """The environment variables a config reads through ``${oc.env:NAME}``, sorted."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return sorted(set(_ENV_REF.findall(text)))


def env_values(path: Path, env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Each variable the config reads and its value here (None when unset)."""
    env = os.environ if env is None else env
    return {name: env.get(name) for name in env_names(path.read_bytes())}


def check_unchanged(path: Path, expected_hash: str, expected_env: Mapping[str, str | None]) -> None:
    """Raise ConfigDriftError when the file or a variable it reads differs from what was planned."""
    if config_hash(path) != expected_hash:
        raise ConfigDriftError(
            f"{path} changed since this DAG was parsed (hash {expected_hash}); wait for the "
            "DAG processor to re-parse it, then clear this task"
        )
    actual = env_values(path)
    for name in sorted(set(actual) | set(expected_env)):
        if actual.get(name) != expected_env.get(name):
            raise ConfigDriftError(
                f"{path} reads ${{oc.env:{name}}}: {expected_env.get(name)!r} when the DAG was parsed, "
                f"{actual.get(name)!r} on this worker; set it the same for the DAG processor and the workers"
            )


def default_config_dir(dags_folder: Path) -> Path:
    """Where configs are looked for when ``$AUTOEXP_CONFIGS`` is unset: ``config/`` beside the DAGs
    folder (``<dags_folder>/../config``): this repository's layout, and ``$AIRFLOW_HOME/config`` for
    Airflow's default DAGs folder. Derived from the DAGs folder, never from where this package is
    installed: an installed package holds no configs.
    """
    return dags_folder.parent / "config"


def config_paths(default_dir: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    """Configs to build: ``$AUTOEXP_CONFIGS`` (os.pathsep-separated paths or globs), else dir/*.yaml."""
    spec = (env if env is not None else os.environ).get(CONFIGS_ENV, "")
    patterns: Iterable[str] = [p for p in spec.split(os.pathsep) if p] or [str(default_dir / "*.yaml")]
    found: dict[Path, Path] = {}  # a config listed twice (a glob and its file) is built once
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) or [pattern]  # a missing file is reported, not skipped
        for match in matches:
            found.setdefault(Path(match).absolute(), Path(match))
    return list(found.values())
