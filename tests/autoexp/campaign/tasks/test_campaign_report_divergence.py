"""The campaign report task over real SSH to the local cluster: a training whose job printed a dead
model's lines and FAILED is a "diverged" cell of campaign.json; one that crashed otherwise stays
"failed". sacct alone says FAILED for both: the task reads each one's log. One the live DIVERGED rule
cancelled (a loss spike: no NaN in its log) is "diverged" by the marker the plugin's cancel left."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.naming import FATAL_REASON, cancel_marker_path

from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.tasks.campaign_report_task import build_campaign_report
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = pytest.mark.slurm

CALM = " iteration      360/    1000 | lm loss: 2.500000E+00 | grad norm: 1.0 |"
SPIKE = " iteration      370/    1000 | lm loss: 9.512000E+00 | grad norm: 41.2 |"
DEAD_LOG = (
    Path(__file__).resolve().parents[1] / "planning" / "data" / "training_logs" / "dead_model_lr1e3.log"
)


def _spec(dag_id: str, logs: Path, tag: str) -> cr.ExperimentSpec:
    phase = cr.PhaseSpec("pretrain", (f"{tag}_{dag_id}_train",), 1000, str(logs / f"{dag_id}_ckpt"),
                         str(logs / f"{dag_id}-%j.out"))  # fmt: skip
    return cr.ExperimentSpec(dag_id, dag_id, {}, 10, str(logs / f"{dag_id}_report.json"), (phase,), 384, 1)


def test_a_dead_model_that_failed_or_a_spike_cancel_is_diverged_and_a_crash_is_not(
    slurm_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = f"t{int(time.time())}"  # job names of this test only, whatever sacct already holds
    specs = [_spec("dead", tmp_path, tag), _spec("crash", tmp_path, tag), _spec("spike", tmp_path, tag)]
    scripts = {
        "dead": f"#!/bin/bash\ncat {DEAD_LOG}\nexit 1\n",
        "crash": "#!/bin/bash\necho 'RuntimeError: CUDA error: an illegal memory access'\nexit 1\n",
        "spike": f"#!/bin/bash\necho '{CALM}'\necho '{SPIKE}'\nsleep 300\n",
    }
    names = [s.phases[0].jobs[0] for s in specs]
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 60))
    with SlurmHook(slurm_cluster.conn_id) as hook:
        ids = {
            s.dag_id: hook.submit(
                script=scripts[s.dag_id],
                sbatch_args=[f"--output={s.phases[0].train_log}", "-J", s.phases[0].jobs[0]],
            )
            for s in specs
        }
        spike_log = specs[2].phases[0].train_log.replace("%j", ids["spike"])
        deadline = time.monotonic() + 120  # three short jobs on a loaded 2-core machine
        cancelled = False
        while True:
            states = {r.job_id: r.state.value for r in hook.accounting(names, since)}
            if not cancelled and states.get(ids["spike"]) == "RUNNING":
                # what the trigger's live rule does (SlurmJobTrigger._cancel_fatal): marker, then scancel
                reason = f"{FATAL_REASON}: DIVERGED: {SPIKE}"
                hook.cancel(ids["spike"], marker=cancel_marker_path(spike_log), reason=reason)
                cancelled = True
            if [states.get(ids[k]) for k in ("dead", "crash", "spike")] == ["FAILED", "FAILED", "CANCELLED"]:
                break
            assert time.monotonic() < deadline, f"jobs {ids} did not end FAILED, FAILED, CANCELLED: {states}"
            time.sleep(1)
    monkeypatch.setenv("AUTOEXP_REPORT_ROOT", str(tmp_path / "reports"))
    context: Any = {"params": {}}
    build_campaign_report(
        stem="c",
        ssh_conn_id=slurm_cluster.conn_id,
        since=since,
        specs=[s.to_dict() for s in specs],
        context=context,
    )
    campaign = json.loads((tmp_path / "reports" / "c" / "campaign.json").read_text())
    cells = {e["dag_id"]: e["cells"]["pretrain"] for e in campaign["experiments"]}
    assert cells["dead"]["state"] == "diverged"
    assert "iteration        9/" in cells["dead"]["diverged_line"]  # 5th flat interval, before the NaN
    assert (cells["crash"]["state"], "diverged_line" in cells["crash"]) == ("failed", False)
    assert (cells["spike"]["state"], cells["spike"]["diverged_line"]) == ("diverged", SPIKE.strip())
