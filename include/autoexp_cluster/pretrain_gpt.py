"""Megatron-LM-style entry point: ``python pretrain_gpt.py <megatron args>`` or under torchrun."""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # The guard matters: dist_checkpointing's writer starts a spawn Manager that re-imports __main__.
    if __package__ in (None, ""):
        # Run as a file: make the package importable even without PYTHONPATH=include.
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from autoexp_cluster.trainer import main

    sys.exit(main())
