"""On the local Slurm cluster: three conversion tasks of a phase whose checkpoints are ready together
share ONE Slurm job (``airflow.share_conversion_jobs``), each judged by its own checkpoint.

No Airflow: each "task" does what CampaignSlurmOperator does before waiting (its completion command,
then the plugin's locked submit, which adopts the phase's active job or submits one), with the name,
log and environment the planner gives every instance of the phase.
"""

from __future__ import annotations

import logging
import subprocess
import time
from datetime import date
from pathlib import Path

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.states import TERMINAL_STATES, SlurmState
from slurm_operator.operators.submission import SubmitSpec, submit_attempt
from slurm_operator.policy.completion import command_done

from autoexp.campaign.planning import run_layout
from autoexp.campaign.planning.dag_plan import SERIES_VAR
from tests.fixtures import checkpoint_layouts as layouts
from tests.fixtures.slurm_cluster import LocalCluster
from tests.include.templates import CONVERT, demo_params, render
from tests.include.test_convert_batch import FAKE_PYTHON

pytestmark = [pytest.mark.slurm]

log = logging.getLogger(__name__)


def test_three_ready_checkpoints_are_converted_by_one_slurm_job(
    slurm_cluster: LocalCluster, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    run = logs / "exp"
    for it in (20, 40, 60):
        layouts.torch_dist(run / "checkpoints", it)
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    script = render(
        CONVERT, demo_params(logs, tmp_path / "d", tmp_path / "t", PYTHON=str(python)), tmp_path / "c.sh"
    )
    name = f"exp-pretrain-convert_eval-{tmp_path.name[-10:]}"
    # What the planner gives every instance of the phase (dag_plan._checkpoints, shared).
    spec = SubmitSpec(
        remote_dir=str(tmp_path / "autoexp"),
        name=name,
        output_pattern=run_layout.convert_batch_output(str(run / "slurm_convert.out"), str(run)),
        script=None,
        script_path=str(script),
        sbatch_args=["--time=5"],
        # (CALLS and FAKE_SECONDS feed the stand-in PYTHON: 2 s per conversion keeps the job active
        # while the other two tasks come)
        environment={SERIES_VAR: "0 20 60", "CALLS": str(calls), "FAKE_SECONDS": "2"},
        lock_path=str(tmp_path / "autoexp" / "locks" / "submit.lock"),
    )
    jobs = []
    with SlurmHook(slurm_cluster.conn_id) as hook:
        for it in (20, 40, 60):  # the three mapped tasks, as their waits release them
            if command_done(hook.run(run_layout.marker_exists(str(run), it))):
                continue  # done by the shared job already: nothing submitted
            jobs.append(submit_attempt(hook, spec, 1, 1, log))
        assert len({a.job_id for a in jobs}) == 1, jobs
        # One submitted, the others adopted it (a task whose checkpoint it already did submits nothing).
        assert [a.reattached for a in jobs] == [False] + [True] * (len(jobs) - 1)
        deadline = time.monotonic() + 120
        while True:
            records = hook.accounting([name], date.today().isoformat())
            if records and all(r.state in TERMINAL_STATES for r in records):
                break
            assert time.monotonic() < deadline, records
            time.sleep(1)
        assert [(r.job_id, r.state) for r in records] == [(jobs[0].job_id, SlurmState.COMPLETED)]
        # Each task's own completion command now says done.
        for it in (20, 40, 60):
            assert command_done(hook.run(run_layout.marker_exists(str(run), it))), it
    converted = [
        line for line in calls.read_text().splitlines() if line.startswith("autoexp_cluster.convert")
    ]
    assert len(converted) == 3, converted
    out = subprocess.run(["ls", str(run)], capture_output=True, text=True, check=True).stdout
    assert f"slurm_convert-batch-{jobs[0].job_id}.out" in out.split()
