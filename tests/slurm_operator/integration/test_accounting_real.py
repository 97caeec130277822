"""SlurmHook.accounting against the real cluster: one sacct by job name, every run, other jobs left out."""

from __future__ import annotations

import time
import uuid
from datetime import date
from pathlib import Path

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import SlurmState
from slurm_operator.policy.watchdog import elapsed_seconds
from slurm_operator.remote.parsers import tres_counts

from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = [pytest.mark.slurm]


def test_accounting_lists_every_run_of_the_named_jobs(slurm_cluster: LocalCluster, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    names = [f"acct-{tag}-a", f"acct-{tag}-b", f"acct-{tag}-other"]
    script = "#!/bin/bash\nsleep 1\n"
    with SlurmHook(slurm_cluster.conn_id) as hook:
        ids = {
            hook.submit(script=script, sbatch_args=[f"--job-name={n}", f"--output={tmp_path}/%j.out"]): n
            for n in (names[0], names[0], names[1], names[2])
        }
        # slurmdbd records the end of a job a moment after it: poll (bounded) until all four ended.
        deadline = time.monotonic() + 120
        while True:
            records: list[JobRecord] = hook.accounting(names, date.today().isoformat())
            if len(records) == 4 and all(r.state is SlurmState.COMPLETED for r in records):
                break
            assert time.monotonic() < deadline, f"sacct did not show the 4 jobs {ids} completed: {records}"
            time.sleep(1)
        wanted = hook.accounting(names[:2], date.today().isoformat())
    assert sorted((r.job_id, r.name) for r in wanted) == sorted(
        (i, n) for i, n in ids.items() if n != names[2]
    )
    for r in wanted:
        assert tres_counts(r.alloc_tres)["cpu"] >= 1
        assert elapsed_seconds(r.elapsed) is not None
        assert r.start
        assert r.end
