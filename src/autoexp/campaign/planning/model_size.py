"""A model's size from its shape parameters (planning: the DAG docs and the report's columns show it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def param_count(params: Mapping[str, Any]) -> int | None:
    """Approximate parameter count 12 L H^2 + V H (the LR_WARMUP_ITERS formula of
    config/scaling_exps.yaml) when the shape is known."""
    try:
        layers, hidden = int(params["NUM_LAYERS"]), int(params["HIDDEN_SIZE"])
        vocab = int(params.get("VOCAB_SIZE", 0))
    except (KeyError, TypeError, ValueError):
        return None
    return 12 * hidden * hidden * layers + vocab * hidden
