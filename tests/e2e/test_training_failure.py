"""A training that fails for good: its waits end at once (not after their 7-day default), and the run
sends exactly one failure alert, by mail, naming the training's Slurm job, state and log; the deadline
alert the config asks for (1 s: missed by any run) arrives once too, from the scheduler's executor."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, REPO, create_pool, reduced_config
from tests.fixtures.alert_sinks import SmtpSink, mail_text

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow]

NOTIFY = "  notify: {kind: smtp, to: [ops@example.org], conn_id: alerts_smtp, deadline_secs: 1}\n"


def test_failed_training_fails_its_waits_fast_and_mails_once(
    tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any
) -> None:
    # Every training attempt dies at once (no such script); no retries, one Slurm attempt per try.
    script = 'TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"'
    config = reduced_config(
        tmp_path,
        (script, 'TRAIN_SCRIPT: "/nonexistent/train.py"'),
        ("  retries: 1\n", "  retries: 0\n"),
        ("  paused: false\n", "  paused: false\n" + NOTIFY),
    )
    smtp = SmtpSink()
    smtp.controller.start()
    try:
        stack = airflow_stack_factory(
            REPO / "dags",
            AUTOEXP_CONFIGS=str(config),
            AUTOEXP_DEMO_DIR=str(tmp_path / "campaign"),
            AIRFLOW_CONN_ALERTS_SMTP=smtp.connection(),
        )
        create_pool(stack)
        run_id = stack.trigger(DAG_ID, {"max_attempts": 1}, timeout=300)
        start = time.monotonic()
        assert stack.wait_run(DAG_ID, run_id, timeout=420, poll=3) == "failed"
        took = time.monotonic() - start
        states = stack.task_states(DAG_ID, run_id)
        assert states["pretrain.train"] == "failed", states
        # The waits saw pretraining's failed marker: the mapped checkpoint waits and the cooldown's
        # branch wait failed (not retried), so nothing downstream waited on.
        assert states["pretrain.checkpoints.wait"] == "failed", states
        assert states["cooldown_8K.wait_branch_checkpoint"] == "failed", states
        assert states["cooldown_8K.train"] == "upstream_failed", states
        assert states["report"] == "upstream_failed", states
        log = stack.task_log(DAG_ID, run_id, "cooldown_8K.wait_branch_checkpoint")
        assert "its training failed" in log
        # Their own budget would have been (0 + 1) x 1 attempt x 15 min + 1 h.
        assert took < 300, took

        # The dag-processor runs the run's failure callback: one mail, however many tasks failed.
        def subjects(word: str) -> list[str]:
            return [str(m["Subject"]) for m in smtp.mails if m["Subject"].startswith(f"autoexp {word}")]

        stack.poll("the failure mail", lambda: subjects("FAILED") or None, timeout=120, interval=2)
        # Per-task alerts would have been sent by the tasks themselves, before the run failed; a few
        # seconds more let a late duplicate of the run's alert show.
        time.sleep(5)
        assert len(subjects("FAILED")) == 1, [m["Subject"] for m in smtp.mails]
        late = subjects("LATE")
        assert len(late) == 1, [m["Subject"] for m in smtp.mails]
        assert late[0].endswith(f"run={run_id} not done 1 s after queueing"), late
        assert len(smtp.mails) == 2, [m["Subject"] for m in smtp.mails]
        (failure,) = [m for m in smtp.mails if m["Subject"].startswith("autoexp FAILED")]
        text = mail_text(failure)
        train_log = stack.task_log(DAG_ID, run_id, "pretrain.train")
        job_id = re.search(r"Slurm job (\d+) FAILED", train_log)
        assert job_id is not None, train_log[-3000:]
        assert f"task=pretrain.train slurm_job={job_id[1]}" in text, text
        assert "state=FAILED" in text, text
        assert re.search(r"log=/\S+", text), text
        assert f"/dags/{DAG_ID}/runs/" in text, text
    finally:
        smtp.controller.stop()
