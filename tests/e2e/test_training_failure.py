"""A training that fails for good ends its checkpoint waits at once, not after their 7-day default."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, reduced_config, start_stack

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow]


def test_failed_training_fails_its_waits_fast(
    tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any
) -> None:
    # Every training attempt dies at once (no such script); no retries, one Slurm attempt per try.
    script = 'TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"'
    config = reduced_config(
        tmp_path, (script, 'TRAIN_SCRIPT: "/nonexistent/train.py"'), ("  retries: 1\n", "  retries: 0\n")
    )
    stack = start_stack(airflow_stack_factory, config, tmp_path / "campaign")
    run_id = stack.trigger(DAG_ID, {"max_attempts": 1}, timeout=300)
    start = time.monotonic()
    assert stack.wait_run(DAG_ID, run_id, timeout=420, poll=3) == "failed"
    took = time.monotonic() - start
    states = stack.task_states(DAG_ID, run_id)
    assert states["pretrain.train"] == "failed", states
    # The waits saw pretraining's failed marker: the mapped checkpoint waits and the cooldown's branch
    # wait failed (not retried), so nothing downstream waited on.
    assert states["pretrain.checkpoints.wait"] == "failed", states
    assert states["cooldown_8K.wait_branch_checkpoint"] == "failed", states
    assert states["cooldown_8K.train"] == "upstream_failed", states
    assert states["report"] == "upstream_failed", states
    log = stack.task_log(DAG_ID, run_id, "cooldown_8K.wait_branch_checkpoint")
    assert "its training failed" in log
    # Their own budget would have been (0 + 1) x 1 attempt x 15 min + 1 h.
    assert took < 300, took
