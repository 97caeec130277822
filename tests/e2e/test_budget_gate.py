"""The budget gate on a real Airflow, answered in Airflow's UI (headless Chromium, screenshotted): the
campaign trigger DAG's approval waits with the estimate shown on its Required Action tab; Approve ->
the experiment's run starts, Reject -> none starts.

The experiments run as dry runs (no Slurm job: what is under test is whether they are triggered).
Each answer waits until the scheduler has processed the approval's pause: Airflow 3.3.2 marks a
resumed HITL task failed when the pause's executor event arrives after the answer (seen at a load of
40 on 2 cores with an answer 2 s after the pause), which a human's answer does not race.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from selenium.webdriver.common.by import By

from tests.e2e.campaign import DAG_ID, reduced_config, start_module_stack
from tests.e2e.test_ui_browser import Ui, _browser
from tests.fixtures.airflow_stack import AirflowStack

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

CAMPAIGN_DAG = "autoexp_campaign_demo-reduced"
# Any slice of the reduced demo costs more than this: every trigger asks.
GATE = "  gate: {gpu_hours_threshold: 1.0e-9, tflops_per_gpu: 100}\n"


@dataclass
class Gate:
    stack: AirflowStack
    ui: Ui

    def pending(self) -> str:
        """Trigger the campaign (dry runs); return the run id once its approval waits for an answer."""
        run_id = self.stack.trigger(CAMPAIGN_DAG, {"dry_run": True}, timeout=300)
        self.stack.wait_task_state(CAMPAIGN_DAG, run_id, "approve", {"awaiting_input"}, timeout=300)
        paused = f"task_id='approve', run_id='{run_id}'"
        scheduler_log = self.stack.log_file("scheduler")

        def processed() -> bool | None:
            text = scheduler_log.read_text(errors="replace")
            return (
                True
                if any(paused in line for line in text.splitlines() if "executor event" in line)
                else None
            )

        self.stack.poll("the scheduler to take the approval's pause", processed, timeout=120)
        return run_id

    def answer(self, run_id: str, option: str) -> None:
        """Open the approval's Required Action tab, check it shows the estimate, click ``option``."""
        self.ui.open(f"dags/{CAMPAIGN_DAG}/runs/{run_id}/tasks/approve/required_actions")
        self.ui.shows(
            "Start this slice:", "GPU-hours?", "6·N·D FLOPs at 100 TFLOP/s per GPU", "Approve", "Reject"
        )
        self.ui.screenshot(f"budget-gate-{option.lower()}")
        button = next(
            b for b in self.ui.browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == option
        )
        button.click()

    def experiment_runs(self) -> list[dict[str, object]]:
        return list(self.stack.api("GET", f"dags/{DAG_ID}/dagRuns")["dag_runs"])


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    base = tmp_path_factory.mktemp("budget-gate")
    config = reduced_config(base, ("  paused: false\n", "  paused: false\n" + GATE))
    stack = start_module_stack(base / "home", config, base / "campaign")
    browser = None
    try:
        browser = _browser()
        shots = base / "screenshots"
        shots.mkdir()
        yield Gate(stack, Ui(stack, "", browser, shots))
    finally:
        if browser is not None:
            browser.quit()
        stack.stop()


def test_approve_in_the_ui_starts_the_experiments(gate: Gate) -> None:
    run_id = gate.pending()
    assert gate.experiment_runs() == []  # nothing started while the approval waits
    gate.answer(run_id, "Approve")
    assert gate.stack.wait_run(CAMPAIGN_DAG, run_id, timeout=600) == "success"
    runs = gate.experiment_runs()
    assert len(runs) == 1
    assert runs[0]["conf"] == {"dry_run": True, "phases": ["pretrain", "cooldown_8K"]}
    summary_log = gate.stack.task_log(CAMPAIGN_DAG, run_id, "summary")
    assert "started 1 of 1 experiment run(s)" in summary_log
    assert "estimate: " in summary_log


def test_reject_in_the_ui_starts_nothing(gate: Gate) -> None:
    before = len(gate.experiment_runs())
    run_id = gate.pending()
    gate.answer(run_id, "Reject")
    gate.stack.wait_run(CAMPAIGN_DAG, run_id, timeout=600)
    states = gate.stack.task_states(CAMPAIGN_DAG, run_id)
    assert states["approve"] == "success"
    assert states["trigger"] == "skipped"
    assert len(gate.experiment_runs()) == before
