"""DAGs of the injected-fault tests (test_faults_real.py); settings come from ft.json next to this copy."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG
from slurm_operator.operators.slurm import SlurmOperator

_SETTINGS = json.loads(Path(__file__).with_name("ft.json").read_text())
WORK = Path(_SETTINGS["work"])
CONN = _SETTINGS["conn_id"]
# 57 lines, then (after the test's release file) 220 more: 277 in all, as in the issue.
RELAY_SCRIPT = f"""#!/bin/bash
for i in $(seq 1 57); do echo "relay line $i"; done
while [ ! -e {WORK / "release-relay"} ]; do sleep 0.5; done
for i in $(seq 58 277); do echo "relay line $i"; sleep 0.05; done
"""
# Cancelled from outside by the test while it sleeps; after the clear it finds its mark and finishes.
CANCEL_SCRIPT = f"""#!/bin/bash
if [ -e {WORK / "ft_cancel" / "ran-once"} ]; then echo resumed; exit 0; fi
touch {WORK / "ft_cancel" / "ran-once"}
echo started
sleep 300
"""
# Fails (exit 3: not resubmittable) the first time; Airflow's retry submits the next attempt.
RETRY_SCRIPT = f"""#!/bin/bash
if [ -e {WORK / "ft_retry" / "ran-once"} ]; then echo second; exit 0; fi
touch {WORK / "ft_retry" / "ran-once"}
echo first
exit 3
"""
# 10 lines, then (after the test's release file) 240 more over ~2 min, through an sshd outage of
# 60 s and a slurmctld + slurmdbd outage of 30 s.
OUTAGE_SCRIPT = f"""#!/bin/bash
for i in $(seq 1 10); do echo "outage line $i"; done
while [ ! -e {WORK / "release-outage"} ]; do sleep 0.5; done
for i in $(seq 11 250); do echo "outage line $i"; sleep 0.5; done
"""
# A restart loop: the log grows every second, the iteration it reports never passes 37; nothing is
# saved. Started by its test (not with the others), which SIGKILLs the triggerer while it waits.
LOOP_SCRIPT = """#!/bin/bash
if [ -e looped ]; then echo resumed; exit 0; fi
touch looped
while true; do for i in 30 37; do echo " iteration       $i/    1200 | lm loss: 2.5 |"; sleep 1; done; done
"""


def _dag(dag_id: str, script: str, minutes: int = 5, **kwargs: object) -> DAG:
    (WORK / dag_id).mkdir(parents=True, exist_ok=True)
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        SlurmOperator(
            task_id="job",
            ssh_conn_id=CONN,
            script=script,
            remote_dir=str(WORK / dag_id / "run"),
            sbatch_args=[f"--time={minutes}", f"--chdir={WORK / dag_id}"],
            poll_interval=2,
            retry_delay=timedelta(seconds=1),
            **kwargs,  # type: ignore[arg-type]
        )
    return dag


# Retries everywhere: a task start can fail on a loaded machine; the tests judge by try numbers.
_dag("ft_relay", RELAY_SCRIPT, retries=2)
_dag("ft_cancel", CANCEL_SCRIPT, retries=2)
_dag("ft_retry", RETRY_SCRIPT, retries=3)
_dag("ft_outage", OUTAGE_SCRIPT, minutes=20, retries=2)  # waits for its release while the others run
_dag(
    "ft_loop",
    LOOP_SCRIPT,
    retries=2,
    progress_pattern=r"\biteration\s+(\d+)\s*/\s*\d+\s*\|",
    progress_timeout=_SETTINGS["loop_timeout_s"],
    startup_timeout=10,
)
