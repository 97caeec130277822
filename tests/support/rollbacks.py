"""Real checkpoint rollbacks for tests: ckpt_check's own ``heal`` on a truncated newest checkpoint."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from autoexp_cluster.ckpt_check import ROLLBACKS, heal

from tests.fixtures.checkpoint_layouts import cut_short, iter_dir, legacy, set_tracker


def roll_back(checkpoints: Path, good: int, bad: int, minute: int = 0) -> str:
    """Save ``good`` and ``bad`` (legacy), cut ``bad`` short, let ``heal`` roll back to ``good``; its
    line in ckpt_check's record (``heal`` stamps it at 08:``minute`` UTC: one line per rollback)."""
    legacy(checkpoints, good)
    legacy(checkpoints, bad)
    set_tracker(checkpoints, bad)
    cut_short(iter_dir(checkpoints, bad) / "mp_rank_00" / "model_optim_rng.pt")
    outcome = heal(checkpoints, max_rollbacks=9, now=datetime(2026, 12, 3, 8, minute, tzinfo=timezone.utc))
    assert outcome.action == "rolled_back", outcome.message
    return (checkpoints / ROLLBACKS).read_text().splitlines()[-1]
