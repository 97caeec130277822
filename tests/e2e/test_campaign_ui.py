"""The campaign as a whole on a real Airflow with its login on: the trigger DAG starts the first demo's 4
experiments (``first_demo_config``: 2 sizes x 2 LRs, a copy named demo.yaml), the Campaigns page
(plugin) shows them in a real headless Chromium, its JSON needs Airflow's login, and ``autoexp status``
prints one line per experiment.

The last test runs one real training on the local Slurm cluster: its job held (``sbatch --hold``),
the grid says why it waits.

One stack for the module (SimpleAuthManager with a real user and password, not "every user is
admin": the plugin's routes must refuse a request without login). The experiments run as dry runs
(no Slurm job: what is under test is what triggers them and what shows them). The campaign report
is the issue-16 contract's ``campaign.json`` written here as the report DAG writes it (that DAG
is tested on its own); the page reads it from $AUTOEXP_REPORT_ROOT.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from autoexp.campaign.ui.airflow_api import AirflowApi, ApiError
from tests.autoexp.campaign.report.test_cost_text import REPORT as COST
from tests.e2e.campaign import REPO, first_demo_config, job_name
from tests.e2e.test_ui_browser import Ui, _browser
from tests.fixtures.airflow_stack import AirflowStack, start_stack
from tests.scripts.test_campaign_run import driver

pytestmark = [pytest.mark.airflow, pytest.mark.slow]

CAMPAIGN_DAG = "autoexp_campaign_demo"
EXPERIMENTS = [
    "demo_demo_tiny_lr0.003_bs4",
    "demo_demo_tiny_lr0.01_bs4",
    "demo_demo_small_lr0.003_bs4",
    "demo_demo_small_lr0.01_bs4",
]
PHASES = ["pretrain", "cooldown_8K", "cooldown_12K"]


@dataclass
class Campaign:
    stack: AirflowStack
    api: AirflowApi
    password: str
    reports: Path
    run_id: str
    started: dict[str, str]
    browser: WebDriver
    shots: Path
    config: Path  # the campaign's config, named demo.yaml

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.stack.port}"

    def get(self, path: str, token: str | None = None) -> tuple[int, Any]:
        """GET a plugin route as a browser without Airflow's UI would: status and JSON body."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        req = urllib.request.Request(f"{self.url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


def _report(root: Path) -> None:
    """campaign.json and one plot as the report DAG writes them (the contract's shape)."""
    folder = root / "demo"
    folder.mkdir(parents=True)
    experiments = [
        {
            "dag_id": dag_id,
            "experiment": dag_id.removeprefix("demo_"),
            "axes": {},
            "cells": {"pretrain": {"state": "done", "final_loss": 5.5 + i, "metrics": {"acc": 0.25}}},
            "gpu_hours": 0.5 * (i + 1),
        }
        for i, dag_id in enumerate(EXPERIMENTS)
    ]
    report = {
        "campaign": "demo",
        "generated_at": "2026-12-01T12:00:00+00:00",
        "experiments": experiments,
        "fit": {"missing": "2 model sizes: a fit needs 3 or more"},
        "frontier": [],
        **COST,  # 5 CPU-hours by phase and cause (the per-experiment hours above add up to them)
        "plots": ["loss_vs_compute.png", "../secret.png"],
    }
    (folder / "campaign.json").write_text(json.dumps(report))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(2, 2))
    fig.savefig(folder / "loss_vs_compute.png")
    plt.close(fig)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    base = tmp_path_factory.mktemp("campaign-ui")
    password = secrets.token_urlsafe(16)
    (base / "passwords.json").write_text(json.dumps({"admin": password, "viewer": password}))
    _report(base / "reports")
    config = first_demo_config(base)
    env = {
        "AUTOEXP_CONFIGS": str(config),
        "AUTOEXP_DEMO_DIR": str(base / "campaign"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin,viewer:viewer",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(base / "passwords.json"),
        "AUTOEXP_REPORT_ROOT": str(base / "reports"),
    }
    # Not start_module_stack: its create_pool calls the REST API without a login, which this stack refuses.
    stack = start_stack(base / "home", REPO / "dags", env)
    browser = None
    try:
        api = AirflowApi.login(f"http://127.0.0.1:{stack.port}", "admin", password)
        # The pool create_pool makes (the config's, deferred tasks counted), with the admin's login.
        api.call("POST", "pools", {"name": "slurm_local", "slots": 4, "description": "local",
                                   "include_deferred": True})  # fmt: skip
        stack.poll(f"{CAMPAIGN_DAG} to be parsed", lambda: _parsed(api, CAMPAIGN_DAG), 300, 2)
        for dag_id in EXPERIMENTS:
            stack.poll(f"{dag_id} to be parsed", functools.partial(_parsed, api, dag_id), 120, 2)
        # The whole campaign as scripts/demo starts it (the defaults select everything), here as
        # dry runs waited for.
        demo_api = driver.Api(stack.port, api.token)
        started = driver.trigger_campaign(demo_api, config, {"dry_run": True, "wait": True}, timeout=600)
        run_id = api.latest_runs([CAMPAIGN_DAG])[CAMPAIGN_DAG]["dag_run_id"]
        assert _ended(api, run_id) == "success", _task_states(api, run_id)
        browser = _browser()
        shots = base / "screenshots"
        shots.mkdir()
        yield Campaign(stack, api, password, base / "reports", run_id, started, browser, shots, config)
    finally:
        if browser is not None:
            browser.quit()
        stack.stop()


def _parsed(api: AirflowApi, dag_id: str) -> bool | None:
    try:
        api.call("GET", f"dags/{dag_id}")
    except ApiError:  # 404 until the DAG processor has parsed it
        return None
    return True


def _ended(api: AirflowApi, run_id: str) -> str | None:
    return _run_ended(api, CAMPAIGN_DAG, run_id)


def _run_ended(api: AirflowApi, dag_id: str, run_id: str) -> str | None:
    state = str(api.call("GET", f"dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")["state"])
    return state if state in ("success", "failed") else None


def _task_states(api: AirflowApi, run_id: str) -> dict[str, Any]:
    tis = api.call("GET", f"dags/{CAMPAIGN_DAG}/dagRuns/{run_id}/taskInstances")["task_instances"]
    return {f"{t['task_id']}[{t['map_index']}]": t["state"] for t in tis}


def test_the_trigger_dag_starts_every_experiment_and_says_so(campaign: Campaign) -> None:
    api, run_id = campaign.api, campaign.run_id
    mapped = api.call("GET", f"dags/{CAMPAIGN_DAG}/dagRuns/{run_id}/taskInstances/trigger/listMapped")
    # One mapped trigger per experiment, named by it; each waited for its run to succeed.
    named = {t["rendered_map_index"]: t["state"] for t in mapped["task_instances"]}
    assert named == dict.fromkeys(EXPERIMENTS, "success")
    started = api.xcom(CAMPAIGN_DAG, run_id, "summary")
    assert sorted(started) == sorted(EXPERIMENTS)
    assert started == campaign.started  # what the demo prints
    for dag_id, child in started.items():
        run = api.call("GET", f"dags/{dag_id}/dagRuns/{child}")
        assert run["state"] == "success"
        assert run["conf"] == {"dry_run": True, "phases": PHASES}
        assert run["note"].startswith(f"triggered by {CAMPAIGN_DAG}: slice (no filter")


def test_the_plugin_refuses_a_request_without_login(campaign: Campaign) -> None:
    for path in ("/campaigns/", "/campaigns/api/campaigns", "/campaigns/api/campaigns/demo"):
        status, body = campaign.get(path)
        assert status == 401, (path, body)
    status, _ = campaign.get("/campaigns/api/campaigns/demo", token="not-a-jwt")
    assert status == 403
    status, _ = campaign.get("/campaigns/api/campaigns/demo/plots/loss_vs_compute.png")
    assert status == 401


def test_the_json_behind_the_page(campaign: Campaign) -> None:
    token = campaign.api.token
    status, listing = campaign.get("/campaigns/api/campaigns", token)
    assert (status, listing) == (200, [{"campaign": "demo", "config": str(campaign.config)}])
    status, view = campaign.get("/campaigns/api/campaigns/demo", token)
    assert status == 200
    assert view["trigger_dag_id"] == CAMPAIGN_DAG
    assert view["phases"] == PHASES
    assert view["axes"] == {
        "EXPERIMENTS": ["tiny", "small"],
        "LR": ["0.003", "0.01"],
        "PHASE": ["PRETRAIN", "COOLDOWN"],
        "CD_SCALE": ["8K", "12K"],
    }
    rows = {e["dag_id"]: e for e in view["experiments"]}
    assert sorted(rows) == sorted(EXPERIMENTS)
    tiny = rows["demo_demo_tiny_lr0.003_bs4"]
    assert tiny["axes"] == {"EXPERIMENTS": "tiny", "LR": "0.003", "BIAS": "WITH", "DATASET": "DEMO"}
    assert tiny["run"]["state"] == "success"
    run_id = urllib.parse.quote(tiny["run"]["run_id"], safe="")
    assert tiny["run"]["url"] == f"/dags/demo_demo_tiny_lr0.003_bs4/runs/{run_id}"
    # Dry runs skip every phase; the numbers come from the report.
    assert {p: c["state"] for p, c in tiny["cells"].items()} == dict.fromkeys(PHASES, "skipped")
    assert tiny["cells"]["pretrain"]["final_loss"] == 5.5
    assert tiny["gpu_hours"] == 0.5
    assert view["report"]["gpu_hours"] == {"total": 5.0, "wasted": 0.25, "by_unit": {"cpu": 5.0}}
    cost = view["report"]["answer"][-1]  # what it cost, in words and as a table of text cells
    assert cost["title"] == "What it cost"
    assert cost["table"]["rows"][-1] == ["all phases", "3.5", "1.25", "0.25", "5"]
    assert view["report"]["plots"] == ["loss_vs_compute.png"]  # a path in the list is not served
    status, _ = campaign.get("/campaigns/api/campaigns/nope", token)
    assert status == 404
    # The run tab's JSON: the run's phases; no report (dry runs skip it).
    run_id = tiny["run"]["run_id"]
    status, run = campaign.get(f"/campaigns/api/experiments/{tiny['dag_id']}/{run_id}", token)
    assert status == 200
    skipped = {"state": "skipped", "latest_checkpoint": None, "evaluations": 0, "pending": None}
    assert run["phases"] == {phase: skipped for phase in PHASES}
    assert run["note"] == "no report yet: the run's report task has not written one"


def _login(campaign: Campaign) -> None:
    """The browser holds the login cookie the UI's own login sets."""
    campaign.browser.get(f"{campaign.url}/api/v2/monitor/health")
    campaign.browser.add_cookie({"name": "_token", "value": campaign.api.token or "", "path": "/"})


def _in_frame(ui: Ui, *texts: str) -> str:
    """The text of the external view's iframe once it shows ``texts``."""
    frame = WebDriverWait(ui.browser, 60).until(lambda b: b.find_element(By.TAG_NAME, "iframe"))
    ui.browser.switch_to.frame(frame)
    try:
        return ui.shows(*texts)
    finally:
        ui.browser.switch_to.default_content()


def test_campaigns_page_in_a_real_browser(campaign: Campaign) -> None:
    _login(campaign)
    ui = Ui(campaign.stack, campaign.run_id, campaign.browser, campaign.shots)
    names = [d.removeprefix("demo_") for d in EXPERIMENTS]
    ui.open("campaigns/")
    ui.shows(
        *names,
        "Trigger slice",
        "What it cost",
        "what it cost: 5 CPU-hours, 0.25 wasted (no GPU was allocated: elapsed x allocated CPUs)",
        "tiny (36,864 params): 81,920 tokens per CPU-hour (40,960 tokens in 0.5 CPU-hours)",
        "CPU-hours by phase and cause",
    )
    # The hours column says their unit: this report's jobs had no GPU.
    grid = campaign.browser.find_element(By.CSS_SELECTOR, "tr[data-dag]").find_element(By.XPATH, "..")
    assert grid.find_element(By.TAG_NAME, "tr").text.split()[-1] == "CPU-hours"
    # Every experiment row: its run succeeded, its three phases skipped (dry runs), the report's
    # final loss in the pretraining cell and its hours.
    for i, dag_id in enumerate(EXPERIMENTS):
        row = campaign.browser.find_element(By.CSS_SELECTOR, f'tr[data-dag="{dag_id}"]')
        assert row.text.split()[0] == names[i]
        assert row.text.split()[-6:] == ["success", "skipped", f"{5.5 + i:.3f}", "skipped", "skipped", ANY]
        cell = row.find_element(By.CSS_SELECTOR, "td.success a")
        assert str(cell.get_attribute("href")).startswith(f"{campaign.url}/dags/{dag_id}/runs/")
    ui.screenshot("campaigns-page")
    # What it cost: the hours per phase x cause, a row per phase and one for all phases.
    cost = campaign.browser.find_element(By.CSS_SELECTOR, "table.cost")
    campaign.browser.execute_script("arguments[0].scrollIntoView()", cost)
    assert [r.text for r in cost.find_elements(By.TAG_NAME, "tr")] == [
        "phase training conversion + evaluation wasted total",
        "pretrain 2.5 1 0.25 3.75",
        "cooldown_8K 1 0.25 0 1.25",
        "all phases 3.5 1.25 0.25 5",
    ]
    ui.screenshot("campaigns-cost")
    # The same page inside Airflow's UI: the "Campaigns" entry of the navigation.
    ui.open("plugin/campaigns")
    _in_frame(ui, *names, "Trigger slice")
    ui.screenshot("campaigns-in-airflow-ui")
    # Each run's "Campaign" tab: that experiment's phases.
    dag_id = EXPERIMENTS[0]
    run_id = campaign.api.xcom(CAMPAIGN_DAG, campaign.run_id, "summary")[dag_id]
    ui.open(f"dags/{dag_id}/runs/{urllib.parse.quote(run_id, safe='')}/plugin/campaign_run")
    ui.shows("Campaign")
    text = _in_frame(ui, dag_id, "latest checkpoint", "cooldown_12K", "no report yet")
    assert text.count("skipped") == 3
    ui.screenshot("experiment-run-tab")


def test_trigger_button_starts_a_slice(campaign: Campaign) -> None:
    _login(campaign)
    ui = Ui(campaign.stack, campaign.run_id, campaign.browser, campaign.shots)
    ui.open("campaigns/")
    ui.shows("Trigger slice")
    form = campaign.browser.find_element(By.CSS_SELECTOR, 'form[data-campaign="demo"]')
    form.find_element(By.CSS_SELECTOR, 'input[name="EXPERIMENTS"][value="tiny"]').click()
    form.find_element(By.NAME, "_text").send_keys("CD_SCALE=8K")
    form.find_element(By.NAME, "_dry").click()
    form.find_element(By.TAG_NAME, "button").click()
    ui.shows("started manual__")
    ui.screenshot("slice-triggered")
    link = form.find_element(By.CSS_SELECTOR, ".result a")
    run_id = urllib.parse.unquote(str(link.get_attribute("href")).rsplit("/", 1)[1])
    state = campaign.stack.poll("the slice's run to end", lambda: _ended(campaign.api, run_id), 300, 3)
    assert state == "success", _task_states(campaign.api, run_id)
    chosen = campaign.api.xcom(CAMPAIGN_DAG, run_id, "select")
    assert [(c["trigger_dag_id"], c["conf"]) for c in chosen] == [
        ("demo_demo_tiny_lr0.003_bs4", {"dry_run": True, "phases": ["cooldown_8K"]}),
        ("demo_demo_tiny_lr0.01_bs4", {"dry_run": True, "phases": ["cooldown_8K"]}),
    ]
    # The slice's run ends once it started the experiments' runs, not when they end: the tests
    # after this one read the campaign's state, which must not change under them.
    for dag_id in (c["trigger_dag_id"] for c in chosen):
        ended = lambda d=dag_id: _no_active_run(campaign.api, d) or None  # noqa: E731
        campaign.stack.poll(f"{dag_id}'s runs to end", ended, 300, 3)


def _no_active_run(api: AirflowApi, dag_id: str) -> bool:
    runs = api.call("GET", f"dags/{dag_id}/dagRuns?state=queued&state=running")
    return int(runs["total_entries"]) == 0


def test_a_viewer_sees_the_campaign_but_cannot_trigger_it(campaign: Campaign) -> None:
    viewer = AirflowApi.login(campaign.url, "viewer", campaign.password)
    status, _ = campaign.get("/campaigns/api/campaigns/demo", viewer.token)
    assert status == 200
    body = json.dumps({"filters": {"EXPERIMENTS": ["tiny"]}, "dry_run": True}).encode()
    for token, expected in ((viewer.token, 403), (campaign.api.token, 422)):
        req = urllib.request.Request(
            f"{campaign.url}/campaigns/api/campaigns/demo/trigger",
            data=body if expected == 403 else json.dumps({"text": "CD_SCALE"}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(req, timeout=60)
        assert refused.value.code == expected
    # A malformed filter is refused before any run starts, in one line.
    assert json.loads(refused.value.read())["detail"] == "filter 'CD_SCALE': write KEY=VALUE[,VALUE...]"


def status_command(campaign: Campaign) -> list[str]:
    python = str(REPO / ".venv/bin/python")
    return [python, "-m", "autoexp", "status", str(campaign.config), "--url", campaign.url]


def test_status_prints_one_line_per_experiment(campaign: Campaign) -> None:
    # Both calls below must see the same campaign (a run still going changes its line between them).
    assert not [d for d in EXPERIMENTS if not _no_active_run(campaign.api, d)]
    env = {
        **os.environ,
        "AUTOEXP_AIRFLOW_PASSWORD": campaign.password,
        # GPU-hours come from the campaign report, read where the command runs.
        "AUTOEXP_REPORT_ROOT": str(campaign.reports),
        "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("src", "plugins", "include")),
    }
    out = subprocess.run(
        status_command(campaign),
        env={**env, "AUTOEXP_AIRFLOW_USER": "admin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == [
        "experiment",
        "run",
        "phase",
        "state",
        "checkpoint",
        "evals",
        "slurm",
        "gpu-h",
    ]
    by_dag = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert sorted(by_dag) == sorted(EXPERIMENTS)
    # All phases skipped (dry runs): the last phase is shown; no job was submitted.
    assert by_dag["demo_demo_small_lr0.01_bs4"] == ["success", "cooldown_12K", "skipped", "-", "0", "-", "2"]
    # The same with a token instead of a user.
    with_token = subprocess.run(
        status_command(campaign),
        env={**env, "AUTOEXP_AIRFLOW_TOKEN": campaign.api.token or ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert with_token.stdout == out.stdout, with_token.stderr
    wrong = subprocess.run(
        status_command(campaign),
        env={**env, "AUTOEXP_AIRFLOW_USER": "admin", "AUTOEXP_AIRFLOW_PASSWORD": "wrong"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("autoexp status: POST ")
    assert "/auth/token: HTTP 401" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1


HELD = "JobHeldUser, no start estimate yet"


def _pretrain_cell(campaign: Campaign, dag_id: str, run_id: str, held: bool) -> dict[str, Any] | None:
    """The pretraining cell of ``dag_id`` in the page's JSON once it shows run ``run_id`` deferred,
    with a pending note (``held``) or without one."""
    status, view = campaign.get("/campaigns/api/campaigns/demo", campaign.api.token)
    assert status == 200, view
    row = next(e for e in view["experiments"] if e["dag_id"] == dag_id)
    cell: dict[str, Any] = row["cells"]["pretrain"]
    if not row["run"] or row["run"]["run_id"] != run_id or cell["state"] != "deferred":
        return None
    return cell if (cell["pending"] is not None) == held else None


@pytest.mark.slurm
def test_the_grid_says_why_a_held_training_waits(campaign: Campaign, slurm_cluster: Any) -> None:
    """A real run's pretraining adopts a job of its name that is held (what a user's ``scontrol
    hold``, or a queue that never frees, looks like): its cell reads "pending: JobHeldUser, ...",
    from the note the wait stored in its XCom (no SSH per page view), in the grid and the run's
    Campaign tab; released, the job runs and the note goes. Last in the module: it changes the
    experiment's latest run, which the tests above read."""
    stack, dag_id = campaign.stack, EXPERIMENTS[1]
    # The stack was started before this test asked for the cluster: its connection goes in the database.
    subprocess.run(
        [str(REPO / ".venv/bin/airflow"), "connections", "add", slurm_cluster.conn_id, "--conn-json",
         slurm_cluster.airflow_conn_json],
        check=True, env=stack.env(), capture_output=True, timeout=120,
    )  # fmt: skip
    name = job_name(campaign.config, Path(stack.extra_env["AUTOEXP_DEMO_DIR"]), dag_id=dag_id)
    submitted = subprocess.run(
        ["sbatch", "--parsable", "--hold", f"--job-name={name}", "--time=15",
         f"--output={slurm_cluster.jobs_dir}/held-%j.out", "--wrap", "sleep 600"],
        check=True, env=slurm_cluster.env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    job = submitted.stdout.strip().split(";")[0]
    try:
        run_id = str(campaign.api.trigger(dag_id, {"phases": ["pretrain"]})["dag_run_id"])
        cell = stack.poll("a pending note", lambda: _pretrain_cell(campaign, dag_id, run_id, True), 300, 3)
        assert cell["pending"] == HELD
        log = stack.task_log(dag_id, run_id, "pretrain.train")
        assert f"adopted active Slurm job {job} named {name}" in log, log[-3000:]
        assert f"Slurm job {job} pending: {HELD}" in log, log[-3000:]

        _login(campaign)
        ui = Ui(stack, campaign.run_id, campaign.browser, campaign.shots)
        ui.open("campaigns/")
        ui.shows(f"pending: {HELD}")
        row = campaign.browser.find_element(By.CSS_SELECTOR, f'tr[data-dag="{dag_id}"]')
        held = row.find_element(By.CSS_SELECTOR, "td.deferred.pending")
        assert held.text == f"pending: {HELD} {5.5 + 1:.3f}"  # the report's final loss stays
        ui.screenshot("campaigns-pending")
        ui.open(f"dags/{dag_id}/runs/{urllib.parse.quote(run_id, safe='')}/plugin/campaign_run")
        _in_frame(ui, f"pending: {HELD}")

        # Released, the job runs: the next poll drops the note; the cell is the task's state again.
        subprocess.run(
            ["scontrol", "release", job], check=True, env=slurm_cluster.env(), capture_output=True, timeout=60
        )
        stack.poll("the note to go", lambda: _pretrain_cell(campaign, dag_id, run_id, False), 300, 3)
        ui.open("campaigns/")
        ui.shows(*[d.removeprefix("demo_") for d in EXPERIMENTS])
        row = campaign.browser.find_element(By.CSS_SELECTOR, f'tr[data-dag="{dag_id}"]')
        assert not row.find_elements(By.CSS_SELECTOR, "td.pending")
        assert "pending" not in row.text
    finally:
        # Cancelled from outside, the training fails without a retry and the run ends.
        subprocess.run(["scancel", job], check=False, env=slurm_cluster.env(), timeout=60)
    state = stack.poll("the run to end", lambda: _run_ended(campaign.api, dag_id, run_id), 300, 3)
    assert state == "failed"
