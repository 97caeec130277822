"""DAGs the real-scheduler+triggerer tests run; settings come from rt.json next to the copy of this file."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG
from slurm_operator.operators.slurm import SlurmOperator
from slurm_operator.sensors.remote_path import SlurmLogSensor

from autoexp.campaign.tasks.checkpoint_sensor import CheckpointSensor

_SETTINGS = json.loads(Path(__file__).with_name("rt.json").read_text())
WORK = Path(_SETTINGS["work"])
CONN = _SETTINGS["conn_id"]
COUNTED = _SETTINGS["counted_conn_id"]
RELEASE = WORK / "release-many"


def _dag(dag_id: str, **kwargs: object) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False, **kwargs)  # type: ignore[arg-type]


def _op(dag_id: str, script: str, minutes: int = 5, **kwargs: object) -> SlurmOperator:
    (WORK / dag_id).mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("ssh_conn_id", CONN)
    kwargs.setdefault("poll_interval", 2)
    return SlurmOperator(
        task_id="job",
        script=script,
        remote_dir=str(WORK / dag_id / "run"),
        sbatch_args=[f"--time={minutes}", f"--chdir={WORK / dag_id}"],
        **kwargs,  # type: ignore[arg-type]
    )


with _dag("rt_ok"):
    _op("rt_ok", "#!/bin/bash\necho hello from $SLURM_JOB_ID\nsleep 3\necho bye\n")

with _dag("rt_fail"):
    _op("rt_fail", "#!/bin/bash\nfor i in $(seq 1 30); do echo line $i; done\nexit 3\n")

with _dag("rt_kill"):
    # Marked failed by the test while deferred: the triggerer's on_kill must scancel within an interval.
    _op("rt_kill", "#!/bin/bash\nsleep 300\n", poll_interval=10)

with _dag("rt_exectimeout"):
    # execution_timeout ends the deferral; the job must not run on unwatched.
    _op(
        "rt_exectimeout",
        "#!/bin/bash\nsleep 300\n",
        poll_interval=10,
        execution_timeout=timedelta(seconds=20),
    )

with _dag("rt_crash"):
    # Polls in the worker (deferrable=False) so that the test can kill the task process while the job
    # runs (it waits for the test's release file); the retry must re-attach to the recorded job
    # instead of submitting a second one.
    _op(
        "rt_crash",
        f"#!/bin/bash\nwhile [ ! -e {WORK / 'release-crash'} ]; do sleep 1; done\necho finished\n",
        deferrable=False,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

with _dag("rt_timeout"):
    # --time=1: the first run is killed as TIMEOUT after a minute; the resubmitted one resumes from
    # the file the first one wrote and finishes at once.
    _op(
        "rt_timeout",
        "#!/bin/bash\nif [ -e started ]; then echo resumed; exit 0; fi\n"
        "touch started\necho first\nsleep 600\n",
        minutes=1,
    )

with _dag("rt_many", max_active_tasks=32):
    # 20 jobs deferred at once on the counted connection; they wait for the test's release file.
    # Each also has hang detection on (its log and its own progress file, never judged hung here):
    # the stat of the watched files must ride on the one batched query.
    (WORK / "rt_many").mkdir(parents=True, exist_ok=True)
    SlurmOperator.partial(
        task_id="job",
        ssh_conn_id=COUNTED,
        script=f"#!/bin/bash\nwhile [ ! -e {RELEASE} ]; do sleep 1; done\necho released $I\n",
        remote_dir=str(WORK / "rt_many" / "run"),
        sbatch_args=["--time=5"],
        poll_interval=_SETTINGS["many_interval"],
        stream_logs=False,
        progress_timeout=600,
        progress_paths=[str(WORK / "rt_many" / "progress-{{ ti.map_index }}")],
    ).expand(environment=[{"I": str(i)} for i in range(20)])

with _dag("rt_sensors"):
    # Both conditions already hold when the run starts (the test prepared the files): the triggers
    # must load in the triggerer and must not fire before the scheduler has seen the deferral.
    CheckpointSensor(
        task_id="ckpt",
        ssh_conn_id=CONN,
        checkpoint_dir=str(WORK / "ckpt"),
        iteration=200,
        poll_interval=2,
        settle_seconds=1,
        timeout=180,
    )
    SlurmLogSensor(
        task_id="log",
        ssh_conn_id=CONN,
        path=str(WORK / "sensor.log"),
        pattern="after training is done",
        poll_interval=2,
        timeout=180,
    )
