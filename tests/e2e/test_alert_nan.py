"""A training that dies of a NaN under a launcher: the run's one alert (kind ``log``) shows the NaN
line, not the launcher's shutdown report that ends the job's log.

The trainer is a stand-in (what is under test is the alert, not Megatron), run by the demo's real
torchrun and srun: it logs a few iterations, a NaN loss, and fails an assertion; torchrun then
prints its ~30 lines of shutdown report and srun its step's exit. One try, one Slurm attempt.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, REPO, create_pool, reduced_config

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1200)]

NAN_LINE = "iteration 120/400 | lm loss: nan | grad norm: nan | number of nan iterations: 1 |"
TRAINER = f"""import sys
for i in range(100, 120):
    print(f"iteration {{i}}/400 | lm loss: {{3.1 - i / 1000:.4f}} | number of nan iterations: 0 |")
print({NAN_LINE!r}, flush=True)
assert False, "found NaN in loss at iteration 120"
"""


def test_the_alert_of_a_nan_run_shows_the_nan_line(
    tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any
) -> None:
    trainer = tmp_path / "nan_train.py"
    trainer.write_text(TRAINER)
    alerts = tmp_path / "alerts.log"
    script = 'TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"'
    config = reduced_config(
        tmp_path,
        (script, f'TRAIN_SCRIPT: "{trainer}"'),
        ("  retries: 1\n", "  retries: 0\n"),
        ("  paused: false\n", f"  paused: false\n  notify: {{kind: log, path: {alerts}}}\n"),
    )
    stack = airflow_stack_factory(
        REPO / "dags", AUTOEXP_CONFIGS=str(config), AUTOEXP_DEMO_DIR=str(tmp_path / "campaign")
    )
    create_pool(stack)
    run_id = stack.trigger(DAG_ID, {"max_attempts": 1}, timeout=300)
    assert stack.wait_run(DAG_ID, run_id, timeout=600, poll=3) == "failed"

    def failure_alert() -> str | None:
        text = alerts.read_text() if alerts.exists() else ""
        return text if "autoexp FAILED" in text else None

    text = stack.poll("the failure alert", failure_alert, timeout=120, interval=2)
    time.sleep(3)  # a late duplicate would show
    text = alerts.read_text()
    assert text.count("autoexp FAILED") == 1, text
    assert f"run={run_id} task=pretrain.train slurm_job=" in text, text
    assert NAN_LINE in text, text
    for noise in (
        "ChildFailedError",
        "Root Cause (first observed failure)",
        "srun: error",
        "torch/distributed",
    ):
        assert noise not in text, (noise, text)
    # no [api] base_url set: the link is under the stack's API port, not localhost:8080
    assert f"http://localhost:{stack.port}/dags/{DAG_ID}/runs/" in text, text
