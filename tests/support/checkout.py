"""Where this checkout lives: only test and demo tooling may know it (the installed package does not)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]  # tests/support/checkout.py -> the repository root
# config/demo.yaml reads it: the demo's campaign folder (scripts/demo and the e2e tests move it).
DEMO_DIR_ENV = "AUTOEXP_DEMO_DIR"
