"""The demo driver's figures: Slurm busy time, job-seconds, the critical path and capacity bound."""

from __future__ import annotations

import http.server
import importlib.util
import json
import sys
import threading
from types import ModuleType
from typing import Any, ClassVar

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.report.campaign_report import experiment_specs
from tests.fixtures.scripts import REPO


def _driver() -> ModuleType:
    """scripts/lib/campaign_run.py, a script rather than a package module (its folder on the path,
    as when run: it imports dispatch_report from there)."""
    if str(REPO / "scripts" / "lib") not in sys.path:
        sys.path.append(str(REPO / "scripts" / "lib"))
    spec = importlib.util.spec_from_file_location(
        "campaign_run", REPO / "scripts" / "lib" / "campaign_run.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("campaign_run", module)
    spec.loader.exec_module(module)
    return module


driver = _driver()
critical_path_seconds = driver.critical_path_seconds


def test_sacct_rows_are_read_by_the_plugin_parser() -> None:
    out = (
        "11|af-d-pretrain.train-aaaa|COMPLETED|0:0|00:00:10|2026-01-01T00:00:00|2026-01-01T00:00:10|n1||\n"
        "12|af-d-pretrain.train-bbbb|RUNNING|0:0|00:00:05|2026-01-01T00:00:10|Unknown|n1||\n"
        "13|af-d-cooldown.train-cccc|PENDING|0:0|00:00:00|Unknown|Unknown|||Priority\n"
    )
    jobs = driver.sacct_jobs(out)
    assert [(name, end is None) for name, _, end in jobs] == [
        ("af-d-pretrain.train-aaaa", False),
        ("af-d-pretrain.train-bbbb", True),
    ]  # the pending job never started: no interval
    assert jobs[0][2] - jobs[0][1] == 10.0


def test_idle_time_is_what_the_union_of_job_intervals_leaves_and_is_told_by_where_it_lies() -> None:
    jobs = [("a", 10.0, 20.0), ("b", 15.0, 30.0), ("c", 40.0, 45.0), ("d", 47.0, 52.0)]
    gaps = driver.idle_gaps(jobs, since=0.0, until=60.0)
    assert gaps == [(0.0, 10.0), (30.0, 40.0), (45.0, 47.0), (52.0, 60.0)]
    assert driver.idle_summary(gaps, 0.0, 60.0) == (
        "10 s before the first job started, 12 s in 2 gaps between jobs (longest 10 s), "
        "8 s after the last one ended"
    )
    running = driver.idle_gaps([("a", 10.0, 20.0), ("b", 15.0, None)], since=0.0, until=50.0)
    assert running == [(0.0, 10.0)]  # b still runs at the end: no tail
    assert driver.idle_gaps([], since=0.0, until=5.0) == [(0.0, 5.0)]


def test_the_capacity_bound_is_the_longer_of_critical_path_and_work_per_slot() -> None:
    jobs = [("a", 0.0, 100.0), ("b", 0.0, 100.0), ("c", 90.0, 130.0), ("d", 120.0, None)]
    # Clipped to the window: d runs 120-150, c 90-130: 100 + 100 + 40 + 30 job-seconds.
    assert driver.job_seconds(jobs, since=0.0, until=150.0) == 270.0
    assert driver.capacity_bound_seconds(critical=60.0, work=270.0, slots=2) == 135.0  # pool-bound
    assert driver.capacity_bound_seconds(critical=200.0, work=270.0, slots=4) == 200.0  # chain-bound


def test_critical_path_follows_pretraining_branch_points_and_cooldowns() -> None:
    plans, settings = load_plans(REPO / "config" / "demo.yaml")
    plan = plans[0]  # pretraining 48 iterations; both cooldowns branch from its last checkpoint
    assert [(c.key, c.start_iter) for c in plan.cooldowns] == [("cooldown_16K", 48), ("cooldown_24K", 48)]
    dag, other = plan_dag(plan, settings), plan_dag(plans[1], settings)
    pretrain, short, long = dag.phases
    assert pretrain.checkpoints is not None
    assert short.checkpoints is not None
    assert long.checkpoints is not None
    jobs = [
        (pretrain.train.job_name, 0.0, 50.0),  # a failed first attempt counts too
        (pretrain.train.job_name, 50.0, 110.0),
        (pretrain.checkpoints.instances[0]["job_name"], 110.0, 140.0),
        (short.train.job_name, 110.0, 130.0),
        (short.checkpoints.instances[0]["job_name"], 130.0, 140.0),
        (long.train.job_name, 110.0, 150.0),
        (long.checkpoints.instances[0]["job_name"], 150.0, 200.0),
        (other.phases[0].train.job_name, 0.0, 1000.0),
    ]
    # pretrain chain: 110 + 30 = 140; cooldown_16K: 110 * 48/48 + 20 + 10 = 140; cooldown_24K: 110 + 40 + 50.
    assert critical_path_seconds([dag], jobs) == 200.0
    # Without the cooldowns' jobs: the pretraining's chain.
    assert critical_path_seconds([dag], jobs[:3]) == 140.0


def test_the_answer_s_budget_is_ten_times_the_largest_planned_cell() -> None:
    plans, settings = load_plans(REPO / "config" / "demo.yaml")
    dags = [plan_dag(plan, settings) for plan in plans]
    budget = driver.answer_budget(dags)
    assert budget == float(f"{budget:.0e}")  # one significant figure
    largest = max(6.0 * s.params * p.tokens for s in experiment_specs(dags) for p in s.phases)
    assert 5 * largest <= budget <= 15 * largest


class _StaleOnce(http.server.BaseHTTPRequestHandler):
    """Airflow's REST API as a DAG whose file's parse was counted but not stored shows it: the DAG
    stale for its first GETs, and a trigger answered 404 once (it went stale again between the two)."""

    calls: ClassVar[list[str]] = []
    stale_gets = 2
    refused_posts = 1

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self.calls.append(f"GET {self.path}")
        stale = sum(c.startswith("GET") for c in self.calls) <= type(self).stale_gets
        self._answer(200, {"dag_id": "d", "is_stale": stale})

    def do_PATCH(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.calls.append(f"PATCH {self.path}")
        self._answer(200, {"dag_id": "d"})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.calls.append(f"POST {self.path}")
        if sum(c.startswith("POST") for c in self.calls) <= type(self).refused_posts:
            self._answer(404, {"detail": "DAG with dag_id: 'd' not found"})
        else:
            self._answer(200, {"dag_run_id": "manual__1"})

    def log_message(self, *args: Any) -> None:
        pass


def test_a_stale_dag_is_waited_for_and_a_404_trigger_asked_again_after_the_next_parse() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StaleOnce)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = driver.Api(server.server_address[1])
        api.wait_dag("d", 30)
        assert api.trigger("d", {}, timeout=30) == "manual__1"
    finally:
        server.shutdown()
    assert _StaleOnce.calls == [
        "GET /api/v2/dags/d",  # stale
        "GET /api/v2/dags/d",  # stale
        "GET /api/v2/dags/d",  # parsed: trigger
        "PATCH /api/v2/dags/d",
        "POST /api/v2/dags/d/dagRuns",  # 404: stale again
        "GET /api/v2/dags/d",  # active
        "POST /api/v2/dags/d/dagRuns",
    ]
