"""Variables every config has unless it sets them: the config's own folder, site settings, conversion
resources.

They sit before the first key of the file, so any assignment in the YAML (top level, grid option or
``-f``) overrides them by AutoExperiment's document order. Nothing here reads the environment: a config
means the same from any shell (issue 15).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from autoexp.config.yamlio import Scalar, YMap, YScalar

# The line number of a built-in value; Config.locate and Job.origin show it as BUILTIN_ORIGIN.
BUILTIN_LINE = 0
BUILTIN_ORIGIN = "<autoexp built-in>"

# name -> (default, meaning); docs/config.md lists them (tests/autoexp/config/test_builtins.py checks).
SITE_DEFAULTS: Mapping[str, tuple[Scalar, str]] = {
    "CONVERT_GPUS_PER_NODE": (1, "GPUs of a conversion/evaluation job (not the training's)"),
    "CONVERT_CPUS_PER_TASK": (8, "CPUs of a conversion/evaluation job"),
    "CONVERT_TIME": (60, "Slurm time limit of a conversion/evaluation job (minutes, or D-HH:MM:SS)"),
    "SOCKET_IFNAME": ("", "network interface for NCCL/Gloo (JUWELS: ib0); empty: their own choice"),
    "MASTER_ADDR_SUFFIX": ("", "appended to the first node's address for multi-node rendezvous (JUWELS: i)"),
    "CONTAINER_ARGS": ("", "extra arguments of `apptainer/singularity exec` (e.g. `--bind /p/data1`)"),
    "MODULES": ("", "environment modules loaded before launching (space-separated, `module load`)"),
    "JOB_ENV": ("", "extra environment of every job: space-separated NAME=VALUE words"),
}


def builtin_values(config_path: Path) -> dict[str, Scalar]:
    """Every built-in variable of the config at ``config_path`` (absolute) and its value."""
    return {"CONFIG_DIR": str(config_path.parent), **{k: v for k, (v, _) in SITE_DEFAULTS.items()}}


def add_builtins(root: YMap, config_path: Path) -> None:
    """Put the built-ins the file does not set at its top level before its first key (in place)."""
    missing = [(k, v) for k, v in builtin_values(config_path).items() if root.index(k) < 0]
    root.entries[:0] = [(k, BUILTIN_LINE, YScalar(v, BUILTIN_LINE)) for k, v in missing]
