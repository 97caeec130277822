"""A diverged training stops after one attempt: recorded DIVERGED, not resubmitted, not retried; its
one alert shows the NaN line and the error, not the launcher's shutdown report.

The trainer is a stand-in (what is under test is the orchestration and the alert, not Megatron),
run by the demo's real torchrun and srun: it logs a few Megatron-style iterations, a NaN loss, and
fails an assertion; torchrun then prints its ~30 lines of shutdown report and srun its step's exit.
The run allows resubmission (the ``max_attempts`` Param is 3) and one Airflow retry: without the
divergence rule the FAILED job would be retried once (2 jobs). With it: one Slurm job, one try,
one alert (kind ``log``) saying DIVERGED with the NaN line.

A loss spike (``airflow.loss_spike`` set): a stand-in whose loss settles, then triples and stays
there while it would train on for minutes; the trigger cancels it at the spike's m-th log interval.
"""

from __future__ import annotations

import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, REPO, create_pool, job_name, reduced_config
from tests.fixtures.stack_api import task_instances

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

NAN_LINE = "iteration 120/400 | lm loss: nan | grad norm: nan | number of nan iterations: 1 |"
TRAINER = f"""import sys
for i in range(100, 120):
    print(f"iteration {{i}}/400 | lm loss: {{3.1 - i / 1000:.4f}} | number of nan iterations: 0 |")
print({NAN_LINE!r}, flush=True)
assert False, "found NaN in loss at iteration 120"
"""


def _jobs(cluster: Any, name: str) -> list[list[str]]:
    """``JobID, State, ElapsedRaw, End`` (End in epoch seconds) of the jobs named ``name``."""
    out = subprocess.run(
        [
            "sacct",
            "-X",
            "-n",
            "-P",
            "-a",
            "--name",
            name,
            "-o",
            "JobID,State,ElapsedRaw,End",
            "-S",
            "now-1hour",
        ],
        capture_output=True,
        text=True,
        check=True,
        env={**cluster.env(), "SLURM_TIME_FORMAT": "%s"},
        timeout=60,
    ).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def _failed_once(stack: Any, run_id: str) -> dict[str, Any]:
    """The run's training task, failed in its first try (no Airflow retry)."""
    train = next(t for t in task_instances(stack, DAG_ID, run_id) if t["task_id"] == "pretrain.train")
    assert (train["state"], train["try_number"]) == ("failed", 1), train
    return train


def _failure_alert(stack: Any, alerts: Path) -> str:
    """The alert file's text once it holds the run's failure alert (kind ``log``)."""

    def sent() -> str | None:
        text = alerts.read_text() if alerts.exists() else ""
        return text if "autoexp FAILED" in text else None

    return str(stack.poll("the failure alert", sent, timeout=120, interval=2))


def test_a_diverged_training_stops_after_one_attempt(
    tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any
) -> None:
    trainer = tmp_path / "nan_train.py"
    trainer.write_text(TRAINER)
    alerts = tmp_path / "alerts.log"
    demo_dir = tmp_path / "campaign"
    config = reduced_config(
        tmp_path,
        ('TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"', f'TRAIN_SCRIPT: "{trainer}"'),
        ("  paused: false\n", f"  paused: false\n  notify: {{kind: log, path: {alerts}}}\n"),
    )
    assert "  retries: 1\n" in config.read_text()  # an Airflow retry is allowed: it must not be used
    stack = airflow_stack_factory(REPO / "dags", AUTOEXP_CONFIGS=str(config), AUTOEXP_DEMO_DIR=str(demo_dir))
    create_pool(stack)
    run_id = stack.trigger(DAG_ID, {"max_attempts": 3}, timeout=300)
    assert stack.wait_run(DAG_ID, run_id, timeout=600, poll=3) == "failed"

    name = job_name(config, demo_dir)
    jobs = _jobs(slurm_cluster, name)
    # One job: no resubmission, no retry. It exits 1 right after its NaN line, usually before the
    # wait's scancel lands (FAILED); a poll that catches it during torchrun's shutdown cancels it.
    assert len(jobs) == 1, jobs
    assert jobs[0][1].split()[0] in ("FAILED", "CANCELLED"), jobs
    slurm_end = "FAILED (exit code 1)" if jobs[0][1] == "FAILED" else "CANCELLED (exit code None)"
    train = _failed_once(stack, run_id)
    text = _failure_alert(stack, alerts)
    time.sleep(3)  # a late duplicate would show
    text = alerts.read_text()
    assert text.count("autoexp FAILED") == 1, text
    job_id = jobs[0][0]
    assert f"run={run_id} task=pretrain.train slurm_job={job_id}" in text, text
    # the record says what Slurm says (not CANCELLED by us for a job that had ended FAILED)
    exit_code = "1" if jobs[0][1] == "FAILED" else "-"
    assert f"slurm_job={job_id} state=DIVERGED exit_code={exit_code} " in text, text
    # The job's error lines, not the launcher's report around them (planning/training_log.py).
    assert NAN_LINE in text, text
    assert "AssertionError: found NaN in loss at iteration 120" in text, text
    launcher = ("ChildFailedError", "Root Cause (first observed failure)", "srun: error", "torch/distributed")
    for noise in launcher:
        assert noise not in text, (noise, text)
    # no [api] base_url set: the link is under the stack's API port, not localhost:8080
    assert f"http://localhost:{stack.port}/dags/{DAG_ID}/runs/" in text, text
    assert (
        f"Slurm job {job_id} {slurm_end}, attempt 1: DIVERGED: its log says {NAN_LINE!r}; "
        "not resubmitted (a rerun would end the same way); log "
    ) in text, text

    # The figures of the note: job-seconds the fault cost, seconds from the job's end to the task's.
    ended = datetime.fromisoformat(train["end_date"]).timestamp()
    fault_to_action = ended - float(jobs[0][3])
    print(
        f"\nDIVERGED: jobs={len(jobs)} job_seconds={jobs[0][2]} job_end_to_task_failed={fault_to_action:.1f}s"
    )
    assert fault_to_action < 120, fault_to_action


# Healthy at about 3.0 for 8 log intervals (the window's 5 fill), then 9.5 (above 3 x 3.0) from
# iteration 9 on: with intervals 2 the rule completes at iteration 10. Without it the job would run
# for minutes more (one interval a second up to 400). SPIKE_AT gets the second spike line's time.
SPIKE_LINE = "iteration 10/400 | lm loss: 9.5000 | number of nan iterations: 0 |"
SPIKE_TRAINER = """import sys, time
for i in range(1, 400):
    loss = 3.0 - i / 1000 if i < 9 else 9.5
    print(f"iteration {{i}}/400 | lm loss: {{loss:.4f}} | number of nan iterations: 0 |", flush=True)
    if i == 10:
        open({spike_at!r}, "w").write(repr(time.time()))
    time.sleep(1.0)
"""


def test_a_loss_spike_stops_the_training_at_its_m_th_interval(
    tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any
) -> None:
    spike_at = tmp_path / "spike_at"
    trainer = tmp_path / "spike_train.py"
    trainer.write_text(SPIKE_TRAINER.format(spike_at=str(spike_at)))
    alerts = tmp_path / "alerts.log"
    demo_dir = tmp_path / "campaign"
    settings = (
        f"  notify: {{kind: log, path: {alerts}}}\n  loss_spike: {{factor: 3, intervals: 2, window: 5}}\n"
    )
    config = reduced_config(
        tmp_path,
        ('TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"', f'TRAIN_SCRIPT: "{trainer}"'),
        ("  paused: false\n", "  paused: false\n" + settings),
    )
    stack = airflow_stack_factory(REPO / "dags", AUTOEXP_CONFIGS=str(config), AUTOEXP_DEMO_DIR=str(demo_dir))
    create_pool(stack)
    run_id = stack.trigger(DAG_ID, {"max_attempts": 3}, timeout=300)
    assert stack.wait_run(DAG_ID, run_id, timeout=600, poll=3) == "failed"

    jobs = _jobs(slurm_cluster, job_name(config, demo_dir))
    assert [job[1].split()[0] for job in jobs] == ["CANCELLED"], jobs  # by the rule, once
    _failed_once(stack, run_id)
    text = _failure_alert(stack, alerts)
    assert f"slurm_job={jobs[0][0]} state=DIVERGED " in text, text
    assert f"DIVERGED: its log says {SPIKE_LINE!r}; not resubmitted" in text, text

    # The figures of the note: seconds from the completing spike line to the job's end, job-seconds.
    line_to_cancel = float(jobs[0][3]) - float(spike_at.read_text())
    print(f"\nLOSS SPIKE: jobs={len(jobs)} job_seconds={jobs[0][2]} line_to_cancel={line_to_cancel:.1f}s")
    assert line_to_cancel < 120, line_to_cancel
