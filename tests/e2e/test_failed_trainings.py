"""Trainings that end badly, each its own reduced demo (a DAG each) on one stack, one after the other.

- **Failed for good** (no such script): its waits end at once (not after their 7-day default), and the
  run sends exactly one failure alert, by mail, naming the training's Slurm job, state and log; the
  deadline alert the config asks for (1 s: missed by any run) arrives once too, from the scheduler's
  executor.
- **Diverged**: stops after one attempt: recorded DIVERGED, not resubmitted, not retried; its one alert
  shows the NaN line and the error, not the launcher's shutdown report. The stand-in trainer, run by
  the demo's real torchrun and srun, logs a few Megatron-style iterations, a NaN loss, and fails an
  assertion; torchrun then prints its ~30 lines of shutdown report and srun its step's exit. The run
  allows resubmission (the ``max_attempts`` Param is 3) and one Airflow retry: without the divergence
  rule the FAILED job would be retried once (2 jobs). With it: one Slurm job, one try, one alert (kind
  ``log``) saying DIVERGED with the NaN line.
- **A loss spike** (``airflow.loss_spike`` set): a stand-in whose loss settles, then triples and stays
  there while it would train on for minutes; the trigger cancels it at the spike's m-th log interval.

What is under test is the orchestration and the alerts, not Megatron. One stack for the three: each
config has its own DAG id prefix and runs folder, and each test triggers and waits for its own DAG.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import job_name, reduced_config, start_module_stack
from tests.fixtures.airflow_stack import AirflowStack
from tests.fixtures.alert_sinks import SmtpSink, mail_text
from tests.fixtures.slurm_cluster import LocalCluster
from tests.fixtures.stack_api import task_instances

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]

EXPERIMENT = "demo_tiny_lr0.003_bs4"
SCRIPT = 'TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"'
NOTIFY_MAIL = "  notify: {kind: smtp, to: [ops@example.org], conn_id: alerts_smtp, deadline_secs: 1}\n"

NAN_LINE = "iteration 120/400 | lm loss: nan | grad norm: nan | number of nan iterations: 1 |"
NAN_TRAINER = f"""import sys
for i in range(100, 120):
    print(f"iteration {{i}}/400 | lm loss: {{3.1 - i / 1000:.4f}} | number of nan iterations: 0 |")
print({NAN_LINE!r}, flush=True)
assert False, "found NaN in loss at iteration 120"
"""

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


@dataclass
class Failures:
    stack: AirflowStack
    cluster: LocalCluster
    base: Path
    demo_dir: Path
    smtp: SmtpSink
    configs: dict[str, Path]  # by DAG id prefix: "failed", "nan", "spike"

    def dag_id(self, prefix: str) -> str:
        return f"{prefix}_{EXPERIMENT}"

    def alerts(self, prefix: str) -> Path:
        return _alerts(self.base, prefix)


def _alerts(base: Path, prefix: str) -> Path:
    """Where the config ``prefix``'s alerts (kind ``log``) go."""
    return base / f"{prefix}-alerts.log"


def _config(base: Path, prefix: str, *replacements: tuple[str, str]) -> Path:
    """The reduced demo under its own DAG id prefix and runs folder (``runs_<prefix>``)."""
    (base / prefix).mkdir()
    logs = ('LOGS: "{DEMO_DIR}/runs"', f'LOGS: "{{DEMO_DIR}}/runs_{prefix}"')
    own = (("dag_id_prefix: demo_", f"dag_id_prefix: {prefix}_"), logs)
    return reduced_config(base / prefix, *own, *replacements)


@pytest.fixture(scope="module")
def failures(slurm_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failures]:
    base = tmp_path_factory.mktemp("failed-trainings")
    (base / "nan_train.py").write_text(NAN_TRAINER)
    (base / "spike_train.py").write_text(SPIKE_TRAINER.format(spike_at=str(base / "spike_at")))

    def notify_log(prefix: str, more: str = "") -> tuple[str, str]:
        log = f"  notify: {{kind: log, path: {_alerts(base, prefix)}}}\n"
        return ("  paused: false\n", "  paused: false\n" + log + more)

    spike_rule = "  loss_spike: {factor: 3, intervals: 2, window: 5}\n"
    configs = {
        # Every training attempt dies at once (no such script); no retries, one Slurm attempt per try.
        "failed": _config(
            base,
            "failed",
            (SCRIPT, 'TRAIN_SCRIPT: "/nonexistent/train.py"'),
            ("  retries: 1\n", "  retries: 0\n"),
            ("  paused: false\n", "  paused: false\n" + NOTIFY_MAIL),
        ),
        "nan": _config(base, "nan", (SCRIPT, f'TRAIN_SCRIPT: "{base / "nan_train.py"}"'), notify_log("nan")),
        "spike": _config(
            base,
            "spike",
            (SCRIPT, f'TRAIN_SCRIPT: "{base / "spike_train.py"}"'),
            notify_log("spike", spike_rule),
        ),
    }
    # an Airflow retry is allowed: the divergence rule must not use it
    assert "  retries: 1\n" in configs["nan"].read_text()
    smtp = SmtpSink()
    smtp.controller.start()
    demo_dir = base / "campaign"
    try:
        stack = start_module_stack(
            base / "home",
            configs["failed"],
            demo_dir,
            AUTOEXP_CONFIGS=os.pathsep.join(str(path) for path in configs.values()),
            AIRFLOW_CONN_ALERTS_SMTP=smtp.connection(),
        )
        try:
            yield Failures(stack, slurm_cluster, base, demo_dir, smtp, configs)
        finally:
            stack.stop()
    finally:
        smtp.controller.stop()


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


def _failed_once(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, Any]:
    """The run's training task, failed in its first try (no Airflow retry)."""
    train = next(t for t in task_instances(stack, dag_id, run_id) if t["task_id"] == "pretrain.train")
    assert (train["state"], train["try_number"]) == ("failed", 1), train
    return train


def _failure_alert(stack: AirflowStack, alerts: Path) -> str:
    """The alert file's text once it holds the run's failure alert (kind ``log``)."""

    def sent() -> str | None:
        text = alerts.read_text() if alerts.exists() else ""
        return text if "autoexp FAILED" in text else None

    return str(stack.poll("the failure alert", sent, timeout=120, interval=2))


def test_failed_training_fails_its_waits_fast_and_mails_once(failures: Failures) -> None:
    stack, smtp, dag_id = failures.stack, failures.smtp, failures.dag_id("failed")
    run_id = stack.trigger(dag_id, {"max_attempts": 1}, timeout=300)
    start = time.monotonic()
    assert stack.wait_run(dag_id, run_id, timeout=420, poll=3) == "failed"
    took = time.monotonic() - start
    states = stack.task_states(dag_id, run_id)
    assert states["pretrain.train"] == "failed", states
    # The waits saw pretraining's failed marker: the mapped checkpoint waits and the cooldown's
    # branch wait failed (not retried), so nothing downstream waited on.
    assert states["pretrain.checkpoints.wait"] == "failed", states
    assert states["cooldown_8K.wait_branch_checkpoint"] == "failed", states
    assert states["cooldown_8K.train"] == "upstream_failed", states
    assert states["report"] == "upstream_failed", states
    log = stack.task_log(dag_id, run_id, "cooldown_8K.wait_branch_checkpoint")
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
    train_log = stack.task_log(dag_id, run_id, "pretrain.train")
    job_id = re.search(r"Slurm job (\d+) FAILED", train_log)
    assert job_id is not None, train_log[-3000:]
    assert f"task=pretrain.train slurm_job={job_id[1]}" in text, text
    assert "state=FAILED" in text, text
    assert re.search(r"log=/\S+", text), text
    assert f"/dags/{dag_id}/runs/" in text, text


def test_a_diverged_training_stops_after_one_attempt(failures: Failures) -> None:
    stack, dag_id, alerts = failures.stack, failures.dag_id("nan"), failures.alerts("nan")
    run_id = stack.trigger(dag_id, {"max_attempts": 3}, timeout=300)
    assert stack.wait_run(dag_id, run_id, timeout=600, poll=3) == "failed"

    jobs = _jobs(failures.cluster, job_name(failures.configs["nan"], failures.demo_dir))
    # One job: no resubmission, no retry. It exits 1 right after its NaN line, usually before the
    # wait's scancel lands (FAILED); a poll that catches it during torchrun's shutdown cancels it.
    assert len(jobs) == 1, jobs
    assert jobs[0][1].split()[0] in ("FAILED", "CANCELLED"), jobs
    slurm_end = "FAILED (exit code 1)" if jobs[0][1] == "FAILED" else "CANCELLED (exit code None)"
    train = _failed_once(stack, dag_id, run_id)
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
    assert f"http://localhost:{stack.port}/dags/{dag_id}/runs/" in text, text
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


def test_a_loss_spike_stops_the_training_at_its_m_th_interval(failures: Failures) -> None:
    stack, dag_id = failures.stack, failures.dag_id("spike")
    run_id = stack.trigger(dag_id, {"max_attempts": 3}, timeout=300)
    assert stack.wait_run(dag_id, run_id, timeout=600, poll=3) == "failed"

    jobs = _jobs(failures.cluster, job_name(failures.configs["spike"], failures.demo_dir))
    assert [job[1].split()[0] for job in jobs] == ["CANCELLED"], jobs  # by the rule, once
    _failed_once(stack, dag_id, run_id)
    text = _failure_alert(stack, failures.alerts("spike"))
    assert f"slurm_job={jobs[0][0]} state=DIVERGED " in text, text
    assert f"DIVERGED: its log says {SPIKE_LINE!r}; not resubmitted" in text, text

    # The figures of the note: seconds from the completing spike line to the job's end, job-seconds.
    line_to_cancel = float(jobs[0][3]) - float((failures.base / "spike_at").read_text())
    print(f"\nLOSS SPIKE: jobs={len(jobs)} job_seconds={jobs[0][2]} line_to_cancel={line_to_cancel:.1f}s")
    assert line_to_cancel < 120, line_to_cancel
