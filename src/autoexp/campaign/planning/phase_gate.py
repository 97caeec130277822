"""Whether a run drives a phase: its ``phases`` Param and its dry-run switch (tasks and triggers ask)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def skip_reason(params: Mapping[str, Any], phase: str) -> str | None:
    """Why a task of ``phase`` is skipped in a run with these Params, None when it runs.

    Every phase task checks this itself (instead of one short-circuit task per phase): one task
    fewer per phase to build at parse time, and a skip cascades to the phase's downstream tasks.
    A wait that the scheduler hands straight to the triggerer asks it there.
    """
    if params.get("dry_run"):
        return f"dry run: {phase} is skipped"
    selected = params.get("phases") or []
    if phase not in selected:
        return f"{phase} is not in this run's phases {list(selected)}: skipped"
    return None
