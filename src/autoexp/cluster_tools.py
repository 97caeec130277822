"""Where this installation's cluster-side tools are: the tree each DAG's stage task uploads to
``{TOOLS_ROOT}/{TOOLS_HASH}`` (autoexp.config.builtins hashes it, the expansion cache fingerprints it).

A wheel carries the repository's ``include/{autoexp_cluster,helpers,sbatch}`` inside the package as
``autoexp/include/`` (pyproject's package data); a checkout (the editable install) has them at the
repository root, two folders above ``src/autoexp``. This module imports nothing of autoexp: a cache hit
reads it without importing the config engine.
"""

from __future__ import annotations

from pathlib import Path

TOOLS_PARTS = ("autoexp_cluster", "helpers", "sbatch")


def tools_source(package: Path) -> Path:
    """The tools tree of the autoexp package at ``package``: its own ``include/`` (a wheel install),
    else the checkout's (``<root>/src/autoexp`` -> ``<root>/include``)."""
    packaged = package / "include"
    return packaged if packaged.is_dir() else package.parents[1] / "include"


TOOLS_SOURCE = tools_source(Path(__file__).resolve().parent)
