"""The README's main job: the shipped config/demo.yaml run by the demo's own driver
(scripts/lib/campaign_run.py, what scripts/demo runs once its services are up) on the session's local
Slurm cluster and a real Airflow stack (scheduler + triggerer, LocalExecutor, PostgreSQL), with the
campaign folder in a temporary folder (AUTOEXP_DEMO_DIR). Checked: every experiment succeeds, the
printout gives the campaign's answer (the fit with its intervals, the compute-optimal N, D, the
held-out check's line, the optimal-LR law), and the Campaigns page of that real campaign shows the
same in headless Chromium with every plot the report lists served (screenshots kept as the other
browser tests keep theirs).

One fault is folded into the run: the first experiment's pretraining task is cleared while its Slurm
job runs; its next try must re-attach to the recorded job, not submit another.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.e2e.campaign import DEMO, job_name, prepare_data, sacct_names, start_stack
from tests.e2e.test_ui_browser import Ui, _browser
from tests.scripts.test_campaign_run import driver

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.ml, pytest.mark.slow]

EXPERIMENTS = 9  # config/demo.yaml: 3 model sizes x 3 learning rates
DAG_ID = "demo_demo_tiny_lr0.002_bs4"  # its first experiment: the one whose training is cleared
TIMEOUT = 2400  # the driver's wait for every experiment (scripts/demo's default is 1800 s)


def wait_for_jobs(cluster: Any, pattern: str, state: str, timeout: float) -> list[str]:
    """Poll accounting until a job named like ``pattern`` is in ``state`` (slurmdbd records lag)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = sacct_names(cluster, pattern)
        if any(line.endswith(f"|{state}") for line in lines):
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"no {state} job matching {pattern!r} after {timeout} s: {lines}")
        time.sleep(1)


def clear_while_running(stack: Any, cluster: Any, demo_dir: Path) -> tuple[str, str]:
    """Clear DAG_ID's pretraining task once its Slurm job runs; -> (run id, the job's sacct line)."""
    run_id = stack.poll(
        f"the campaign to start {DAG_ID}",
        lambda: next((r["dag_run_id"] for r in stack.api("GET", f"dags/{DAG_ID}/dagRuns")["dag_runs"]), None),
        600,
        2,
    )
    stack.wait_task_state(DAG_ID, run_id, "pretrain.train", {"deferred"}, timeout=600)
    # This campaign's job only: other tests of the session leave pretrain.train jobs in accounting too
    # (names are the same in every run of a DAG, and differ by campaign folder).
    before = wait_for_jobs(cluster, job_name(DEMO, demo_dir, dag_id=DAG_ID), "RUNNING", timeout=300)
    assert len(before) == 1, before
    stack.api(
        "POST",
        f"dags/{DAG_ID}/clearTaskInstances",
        {"dag_run_id": run_id, "task_ids": ["pretrain.train"], "only_failed": False, "dry_run": False},
    )
    return run_id, before[0]


@pytest.mark.timeout(TIMEOUT + 900)
def test_the_shipped_demo_prints_the_campaigns_answer_and_shows_it_on_the_campaigns_page(
    tmp_path: Path,
    slurm_cluster: Any,
    airflow_stack_factory: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    demo_dir = tmp_path / "campaign"
    prepare_data(demo_dir, slurm_cluster, docs=None)  # as scripts/demo prepares it
    stack = start_stack(airflow_stack_factory, DEMO, demo_dir)
    # The driver's environment as scripts/demo gives it: the campaign folder, Airflow's home (the
    # report's folder), the cluster's sacct; no login token (every user is admin on this stack).
    for key, value in {**slurm_cluster.env(), "AUTOEXP_DEMO_DIR": str(demo_dir)}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_HOME", stack.env()["AIRFLOW_HOME"])
    monkeypatch.delenv("AUTOEXP_DEMO_TOKEN", raising=False)
    started = time.monotonic()
    result: dict[str, Any] = {}

    def run_driver() -> None:
        try:
            result["rc"] = driver.main(
                ["--port", str(stack.port), "--config", str(DEMO), "--timeout", str(TIMEOUT)]
            )
        except BaseException as exc:  # handed to the test's thread below
            result["error"] = exc

    thread = threading.Thread(target=run_driver, name="demo-driver", daemon=True)
    thread.start()
    run_id, before = clear_while_running(stack, slurm_cluster, demo_dir)
    thread.join(TIMEOUT + 600)
    assert not thread.is_alive(), "the demo's driver did not return"
    if "error" in result:
        raise result["error"]
    printed = capsys.readouterr().out
    with capsys.disabled():
        print(f"\n[shipped demo: driver {time.monotonic() - started:.0f} s]\n{printed}")
    assert result["rc"] == 0, printed

    # The fault: the cleared task's next try found the job it had recorded (the trigger's on_kill left
    # it running) and the job ran to its end once; the checkpoint waits ran in the triggerer only.
    # Under load the job may reach its last iteration before that try starts: then the pre-submit
    # check finds the work done and submits nothing. Either way, no second job (sacct below).
    retry_log = stack.task_log(DAG_ID, run_id, "pretrain.train", try_number=2)
    reattached = "re-attaching to recorded Slurm job" in retry_log
    found_done = re.search(r"work already done \(.*\): no Slurm job submitted", retry_log) is not None
    assert reattached or found_done, retry_log[-3000:]
    after = sacct_names(slurm_cluster, job_name(DEMO, demo_dir, dag_id=DAG_ID))
    assert after == [before.rsplit("|", 1)[0] + "|COMPLETED"], after  # re-attached, not resubmitted
    tis = stack.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    waits = [t for t in tis if t["task_id"].endswith(("wait", "wait_branch_checkpoint"))]
    assert waits, tis
    assert all((t["state"], t["pid"], t["hostname"]) == ("success", None, "") for t in waits), waits

    check_printout(printed)
    out_dir = Path(stack.env()["AIRFLOW_HOME"]) / "autoexp-reports" / DEMO.stem
    data = json.loads((out_dir / "campaign.json").read_text())
    assert len(data["experiments"]) == EXPERIMENTS
    assert all(c["state"] == "done" for e in data["experiments"] for c in e["cells"].values())
    assert "data:image/png;base64," in (out_dir / "index.html").read_text()  # one page, plots inside
    # Before the driver asked for it, each experiment's report Asset had refreshed the campaign report.
    report_dag = f"autoexp_campaign_report_{DEMO.stem}"
    refreshed = stack.api("GET", f"dags/{report_dag}/dagRuns?limit=100")["dag_runs"]
    assert any(r["run_type"] == "asset_triggered" and r["state"] == "success" for r in refreshed), refreshed
    check_campaigns_page(stack, tmp_path / "screenshots", data)


def check_printout(printed: str) -> None:
    """The campaign's answer as scripts/demo prints it (``answer_text``), after the grid."""
    assert f"== campaign {DEMO.stem}" in printed, printed
    assert "scaling-law fit:\n" in printed, printed
    assert re.search(r"\d+ points, \d+ bootstrap resamples \(95% intervals\)", printed), printed
    for name in ("E", "A", "alpha", "B", "beta"):  # each parameter with its bootstrap interval
        assert re.search(rf"^ *{name} = \S+  \[\S+, \S+\]  starts ", printed, re.M), (name, printed)
    budget = r"C = \S+ FLOPs: N_opt = \S+ \[\S+, \S+\], D_opt = \S+ \[\S+, \S+\] \(compute-optimal, 95%\)"
    assert re.search(budget, printed), printed
    # 3 sizes: the held-out check says in one line why there is none (it needs 4).
    assert "held-out check: 3 sizes: too few to hold the largest out; needs >= 4" in printed, printed
    assert re.search(r"^LR\*\(N(, D)?\) = \S+ \* N\^\S+.*\(a in \[", printed, re.M), printed
    assert re.search(r"^  N = \S+, D = \S+: LR\* = \S+ ", printed, re.M), printed  # an optimum in the sweep
    assert "GPU-hours (CPU-hours here" in printed, printed
    assert f"autoexp-reports/{DEMO.stem}/index.html" in printed, printed


def _get(url: str, token: str) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        return answer.status, answer.headers.get("Content-Type", ""), answer.read()


def check_campaigns_page(stack: Any, shots: Path, data: dict[str, Any]) -> None:
    """The Campaigns page of the real campaign: the fit, the LR law, every plot the report lists."""
    base = f"http://127.0.0.1:{stack.port}"
    with urllib.request.urlopen(f"{base}/auth/token", timeout=60) as answer:  # every user is admin
        token = json.loads(answer.read())["access_token"]
    status, _, raw = _get(f"{base}/campaigns/api/campaigns/{DEMO.stem}", token)
    plots = json.loads(raw)["report"]["plots"]
    assert status == 200
    assert sorted(plots) == sorted(data["plots"]), (plots, data["plots"])
    assert {"loss_vs_compute.png", "fit_residuals.png", "lr_parabolas.png", "lr_law.png"} <= set(plots), plots
    for name in plots:
        status, kind, body = _get(f"{base}/campaigns/api/campaigns/{DEMO.stem}/plots/{name}", token)
        assert (status, kind) == (200, "image/png"), (name, status, kind)
        assert body.startswith(b"\x89PNG"), name
        assert len(body) > 1000, (name, len(body))
    shots.mkdir(exist_ok=True)
    browser = _browser()
    try:
        ui = Ui(stack, "", browser, shots)
        browser.get(f"{base}/api/v2/monitor/health")
        browser.add_cookie({"name": "_token", "value": token, "path": "/"})
        ui.open("campaigns/")
        body = ui.shows("scaling-law fit", "N_opt", "held-out check", "LR*(N", "LR* = ")
        assert '{"' not in body  # words and tables, no raw JSON
        # Every listed plot is on the page, loaded (a broken image has no natural width).
        loaded = lambda b: all(  # noqa: E731
            b.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img)
            for img in b.find_elements(By.TAG_NAME, "img")
        )
        stack.poll("the page's plots to load", lambda: loaded(browser) or None, 60, 1)
        shown = {img.get_attribute("alt") for img in browser.find_elements(By.TAG_NAME, "img")}
        assert set(plots) <= shown, (plots, shown)
        ui.screenshot("demo-campaigns-page")
        for name in ("loss_vs_compute.png", "lr_law.png"):
            img = browser.find_element(By.CSS_SELECTOR, f'img[alt="{name}"]')
            browser.execute_script("arguments[0].scrollIntoView()", img)
            ui.screenshot(f"demo-campaigns-{name.removesuffix('.png')}")
    finally:
        browser.quit()
