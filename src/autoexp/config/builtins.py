"""Variables every config has unless it sets them: the config's own folder, site settings, conversion
resources.

They sit before the first key of the file, so any assignment in the YAML (top level, grid option or
``-f``) overrides them by AutoExperiment's document order. Nothing here reads the environment: a config
means the same from any shell (issue 15).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

from autoexp.cluster_tools import TOOLS_PARTS as TOOLS_PARTS
from autoexp.cluster_tools import TOOLS_SOURCE as TOOLS_SOURCE
from autoexp.config.yamlio import Scalar, YMap, YScalar

# The line number of a built-in value; Config.locate and Job.origin show it as BUILTIN_ORIGIN.
BUILTIN_LINE = 0
BUILTIN_ORIGIN = "<autoexp built-in>"

# name -> (default, meaning); docs/cluster-tools.md lists them (tests/autoexp/config/test_builtins.py checks).
SITE_DEFAULTS: Mapping[str, tuple[Scalar, str]] = {
    "CONVERT_GPUS_PER_NODE": (1, "GPUs of a conversion/evaluation job (not the training's)"),
    "CONVERT_CPUS_PER_TASK": (8, "CPUs of a conversion/evaluation job"),
    "CONVERT_TIME": (60, "Slurm time limit of a conversion/evaluation job (minutes, or D-HH:MM:SS)"),
    "SOCKET_IFNAME": ("", "network interface for NCCL/Gloo (JUWELS: ib0); empty: their own choice"),
    "MASTER_ADDR_SUFFIX": ("", "appended to the first node's address for multi-node rendezvous (JUWELS: i)"),
    "CONTAINER_ARGS": ("", "extra arguments of `apptainer/singularity exec` (e.g. `--bind /p/data1`)"),
    "MODULES": ("", "environment modules loaded before launching (space-separated, `module load`)"),
    "JOB_ENV": ("", "extra environment of every job: space-separated NAME=VALUE words"),
    "TOOLS_ROOT": ("", "cluster folder of the staged tools (TOOLS_ROOT/TOOLS_HASH); empty: none staged"),
}


# TOOLS_SOURCE (the tree each DAG's stage task uploads: a wheel's autoexp/include/, else the checkout's
# include/) and TOOLS_PARTS are decided in autoexp.cluster_tools, which the expansion cache reads too.
_HASHES: dict[tuple[tuple[str, int, int], ...], str] = {}


def tools_files(source: Path = TOOLS_SOURCE) -> list[tuple[str, Path]]:
    """(path relative to the tool folder, local file) of every shipped file, sorted; caches left out."""
    found = []
    for part in TOOLS_PARTS:
        for path in (source / part).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                found.append((path.relative_to(source).as_posix(), path))
    return sorted(found)


def tools_hash(source: Path = TOOLS_SOURCE) -> str:
    """Content hash of the shipped tree (names, bytes and the executable bit); 16 hex digits."""
    files = tools_files(source)
    key = tuple((name, path.stat().st_size, path.stat().st_mtime_ns) for name, path in files)
    if key not in _HASHES:
        digest = hashlib.sha256()
        for name, path in files:
            digest.update(f"{name}\0{path.stat().st_mode & 0o111:o}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
        _HASHES[key] = digest.hexdigest()[:16]
    return _HASHES[key]


def builtin_values(config_path: Path) -> dict[str, Scalar]:
    """Every built-in variable of the config at ``config_path`` (absolute) and its value."""
    return {
        "CONFIG_DIR": str(config_path.parent),
        "TOOLS_HASH": tools_hash(),
        **{k: v for k, (v, _) in SITE_DEFAULTS.items()},
    }


def add_builtins(root: YMap, config_path: Path) -> None:
    """Put the built-ins the file does not set at its top level before its first key (in place)."""
    missing = [(k, v) for k, v in builtin_values(config_path).items() if root.index(k) < 0]
    root.entries[:0] = [(k, BUILTIN_LINE, YScalar(v, BUILTIN_LINE)) for k, v in missing]
