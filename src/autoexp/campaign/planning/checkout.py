"""Where this checkout lives, and the defaults that let a clean checkout parse its configs with no env."""

from __future__ import annotations

import os
from pathlib import Path

# src/autoexp/campaign/planning/checkout.py -> the repository root (the package is installed editable,
# in place).
REPO_ROOT = Path(__file__).resolve().parents[4]
# The shell helpers stage uploads next to the scripts (the templates source them there).
HELPERS_DIR = REPO_ROOT / "include" / "helpers"
ROOT_ENV = "AUTOEXP_ROOT"
DEMO_DIR_ENV = "AUTOEXP_DEMO_DIR"


def default_demo_dir(root: Path = REPO_ROOT) -> Path:
    """The demo campaign's folder when AUTOEXP_DEMO_DIR is unset: the checkout's ``.state/``."""
    return root / ".state" / "demo" / "campaign"


def ensure_default_env() -> None:
    """Fill AUTOEXP_ROOT and AUTOEXP_DEMO_DIR (read by the shipped configs' ``${oc.env:...}``) if unset.

    Values a user or a container already set win; only missing ones get this checkout's defaults,
    so the DAG processor, workers and tests parse config/demo.yaml without any set-up.
    """
    os.environ.setdefault(ROOT_ENV, str(REPO_ROOT))
    os.environ.setdefault(DEMO_DIR_ENV, str(default_demo_dir(Path(os.environ[ROOT_ENV]))))
