"""The demo's readiness -> submission figures from sacct, the REST API and checkpoint file times."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from tests.fixtures.scripts import REPO

sys.path.append(str(REPO / "scripts" / "lib"))
import dispatch_report as dr
from dispatch_latency import CHECKPOINT, RUN_START, dependencies


def test_sacct_rows_become_submissions_and_unknown_ends_stay_unknown() -> None:
    out = "a|2026-12-01T10:00:00|2026-12-01T10:00:30\nb|2026-12-01T10:00:05|Unknown\ngarbage\nc|None|None\n"
    subs = dr.parse_submissions(out)
    assert [(s.name, s.end is None) for s in subs] == [("a", False), ("b", True)]
    assert subs[0].end is not None
    assert subs[0].end - subs[0].submit == 30


def test_a_checkpoint_is_written_when_its_last_file_is(tmp_path: Path) -> None:
    folder = tmp_path / "iter_0000020"
    (folder / "mp_rank_00").mkdir(parents=True)
    (folder / "mp_rank_00" / "model_optim_rng.pt").write_text("x")
    (folder / "metadata.json").write_text("{}")
    os.utime(folder / "mp_rank_00" / "model_optim_rng.pt", (1000.0, 1000.0))
    os.utime(folder / "metadata.json", (1005.0, 1005.0))
    assert dr.checkpoint_written(str(tmp_path), 20) == 1005.0
    assert dr.checkpoint_written(str(tmp_path), 40) is None


def test_every_job_of_a_run_is_measured_from_its_dependency(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("AUTOEXP_DEMO_DIR", str(tmp_path))
    plans, settings = load_plans(REPO / "config" / "demo.yaml")
    dag = plan_dag(plans[0], settings)
    deps = dependencies(dag)
    dag_id = dag.experiment.dag_id
    # Each checkpoint's last file written at 1000 + its iteration; the run started at 500.
    for dep in deps.values():
        if dep.kind == CHECKPOINT:
            marker = Path(dep.path) / f"iter_{dep.iteration:07d}" / "done"
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text("")
            os.utime(marker, (1000.0 + dep.iteration, 1000.0 + dep.iteration))
    submissions = [
        dr.Submission(name, 500.0 + 3.0 if dep.kind == RUN_START else 1000.0 + dep.iteration + 10.0, None)
        for name, dep in deps.items()
    ]

    def call(method: str, path: str) -> Any:
        assert method == "GET"
        if "taskInstances" in path:
            return {"task_instances": []}  # no pool contention
        return {"start_date": "1970-01-01T00:08:20+00:00"}  # 500 s

    found = dr.dispatch_latencies(call, [dag], {dag_id: "run"}, submissions, "pool", 4)
    assert len(found) == len(deps)
    by_kind = {f.kind: f.seconds for f in found}
    assert by_kind[RUN_START] == 3.0
    settle = settings.checkpoint_settle_secs
    assert all(f.seconds == 10.0 - settle for f in found if f.kind == CHECKPOINT)
