"""Where this checkout lives (the shipped configs read no environment: their paths use {CONFIG_DIR})."""

from __future__ import annotations

from pathlib import Path

# src/autoexp/campaign/configs/checkout.py -> the repository root (the package is installed editable,
# in place).
REPO_ROOT = Path(__file__).resolve().parents[4]
DEMO_DIR_ENV = "AUTOEXP_DEMO_DIR"
