"""DAGs of the watchdog's real-triggerer tests; settings come from wd.json next to the copy of this file."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG
from slurm_operator.operators.slurm import SlurmOperator

_SETTINGS = json.loads(Path(__file__).with_name("wd.json").read_text())
WORK = Path(_SETTINGS["work"])
CONN = _SETTINGS["conn_id"]
FAKE = _SETTINGS["fake_conn_id"]
# Short clocks so that each case takes about a minute: a job is judged hung after 20 s without a
# change of its log or progress file, and not before it has run 10 s.
WATCH = {"progress_timeout": 20, "startup_timeout": 10, "poll_interval": 3}


def _dag(dag_id: str) -> DAG:
    return DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False)


def _op(dag_id: str, script: str, **kwargs: object) -> SlurmOperator:
    work = WORK / dag_id
    work.mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("ssh_conn_id", CONN)
    return SlurmOperator(
        task_id="job",
        script=script,
        remote_dir=str(work / "run"),
        sbatch_args=["--time=5", f"--chdir={work}"],
        **kwargs,  # type: ignore[arg-type]
    )


with _dag("wd_hung"):
    # A few "iterations" (log lines and a bumped progress file), then a silent hang. The resubmitted
    # attempt reads the progress file, resumes and finishes.
    _op(
        "wd_hung",
        "#!/bin/bash\n"
        "if [ -e progress ]; then echo resumed at $(cat progress); echo iteration 4 > progress; exit 0; fi\n"
        "for i in 1 2 3; do echo iteration $i; echo $i > progress; sleep 2; done\n"
        "sleep 600\n",
        progress_paths=[str(WORK / "wd_hung" / "progress")],
        progress_command=f"cat {WORK / 'wd_hung' / 'progress'}",
        **WATCH,  # type: ignore[arg-type]
    )

with _dag("wd_loop"):
    # A restart loop: the log grows every 2 s, the iteration it reports never passes 37 (it resumes
    # from a checkpoint at 30 each time), nothing is saved. The resubmitted attempt finishes.
    _op(
        "wd_loop",
        "#!/bin/bash\n"
        "if [ -e looped ]; then echo resumed; exit 0; fi\n"
        "touch looped\n"
        'while true; do for i in 30 37; do echo " iteration       $i/    1200 | lm loss: 2.5 |"; '
        "sleep 1; done; done\n",
        progress_pattern=r"\biteration\s+(\d+)\s*/\s*\d+\s*\|",
        **WATCH,  # type: ignore[arg-type]
    )

with _dag("wd_quiet"):
    # Healthy but quiet: a line every 12 s for about a minute, never 20 s without one.
    _op("wd_quiet", "#!/bin/bash\nfor i in 1 2 3 4 5; do echo tick $i; sleep 12; done\n", **WATCH)  # type: ignore[arg-type]

with _dag("wd_unknown"):
    # On the fake-states connection, whose sacct says LAUNCH_FAILED for this DAG's jobs while they
    # really run. The retry re-attaches to the same job and gives up on it again.
    _op(
        "wd_unknown",
        "#!/bin/bash\necho running\nsleep 240\n",
        ssh_conn_id=FAKE,
        poll_interval=2,
        unknown_timeout=15,
        retries=1,
        retry_delay=timedelta(seconds=1),
    )

with _dag("wd_fatal"):
    # Two healthy log intervals, then a dead model (loss flat at ln(384) = 5.951, grad norm 0) every
    # 2 s; the rule wants 3 dead intervals in a row. Each line carries its print time (epoch s).
    _op(
        "wd_fatal",
        "#!/bin/bash\n"
        'log() { echo " iteration $1/ 1200 | lm loss: $2 | grad norm: $3 | t=$(date +%s.%N)"; sleep 2; }\n'
        "for i in 1 2; do log $i 7.1 2.0; done\n"
        "for i in $(seq 3 200); do log $i 5.951 0.000; done\n",
        progress_pattern=r"\biteration\s+(\d+)\s*/\s*\d+\s*\|",
        fatal_patterns={"DEAD": [{"pattern": r"lm loss: 5\.95\d* \| grad norm: 0\.000 ", "repeats": 3}]},
        retries=1,
        retry_delay=timedelta(seconds=1),
        **WATCH,  # type: ignore[arg-type]
    )
