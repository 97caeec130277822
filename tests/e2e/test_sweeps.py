"""Runs are sweeps and jobs keep their identity across runs: backfills, overlapping runs, re-runs.

One real stack (scheduler, triggerer, PostgreSQL) and the local Slurm cluster for the module; three
DAGs, all started at once, each with its own run folder:
- a scheduled DAG backfilled over 3 daily intervals: one training job in all, the later sweeps
  submit nothing;
- a second scheduled DAG run twice at once (a manual run beside a backfill interval, the two are
  capped apart by Airflow): one training job, adopted by the second run;
- an unscheduled DAG whose run fails in a conversion after its training finished: the run triggered
  again submits no training, only the missing conversion.
The training writes the checkpoints a Megatron run would (legacy layout, tracker) within seconds and
the conversion writes its done marker and results: what is under test is the orchestration.
"""

from __future__ import annotations

import csv
import itertools
import json
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import REPO, job_name, reduced_config, start_module_stack
from tests.fixtures.airflow_stack import AirflowStack
from tests.fixtures.slurm_cluster import LocalCluster
from tests.slurm_operator.integration.faults import sacct_rows

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.timeout(900)]

BACKFILLED = "demo_demo_tiny_lr0.003_bs4"  # scheduled: backfilled over 3 intervals
OVERLAPPED = "demo_demo_tiny_lr0.01_bs4"  # scheduled: a manual run beside a backfill interval
RERUN = "again_demo_tiny_lr0.003_bs4"  # unscheduled: failed in a conversion, triggered again
PRETRAIN_ONLY = {"phases": ["pretrain"]}
SUBMITTED, DONE = "submitted attempt", "work already done"

# Saves every SAVE_INTERVAL (20) up to TRAIN_ITERS (40), STEP seconds per save: long enough for the
# overlapping run to find the job running.
FAKE_TRAINER = """
import sys, time, zipfile, pathlib
args = sys.argv[1:]
arg = lambda name: args[args.index(name) + 1]
save, iters, every = pathlib.Path(arg("--save")), int(arg("--train-iters")), int(arg("--save-interval"))
tracker = save / "latest_checkpointed_iteration.txt"
start = int(tracker.read_text()) if tracker.exists() else 0
hold, held_until = save.parent / "hold", time.time() + 600  # the fixture's bound on both runs' start
for it in [*range(every, iters, every), iters]:
    if it <= start:
        continue
    time.sleep(6)
    while it == iters and hold.exists() and time.time() < held_until:
        time.sleep(1)  # the test's run folder asks to keep training going until it says so
    rank = save / f"iter_{it:07d}" / "mp_rank_00"
    rank.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(rank / "model_optim_rng.pt", "w") as zf:
        zf.writestr("archive/data.pkl", b"weights" * 64)
        zf.writestr("archive/version", "3\\n")
    tracker.write_text(str(it))
    print(f" iteration {it:8d}/{iters:8d} | lm loss: {5 - it / 100:.6E} |", flush=True)  # Megatron's form
    print(f"saved iteration {it}", flush=True)
print("after training is done", flush=True)
"""
# AutoExperiment template format (str.format, braces doubled). Fails while fail_convert_<iter> exists.
FAKE_CONVERT = """#!/bin/bash
#SBATCH --account={ACCOUNT}
#SBATCH --partition={PARTITION}
#SBATCH --nodes=1
#SBATCH --time=00:05:00
#SBATCH --output={output_file}
#SBATCH --job-name={name}
RUN_DIR="{RUN_DIR}"
it="$CKPT_ITER"
if [ -e "$RUN_DIR/fail_convert_$it" ]; then echo "conversion of $it fails"; exit 3; fi
mkdir -p "$RUN_DIR/converted_checkpoints" "$RUN_DIR/eval_results/iter_$it"
echo '{{"results": {{"autoexp-tiny": {{"acc,none": 0.5}}}}}}' > "$RUN_DIR/eval_results/iter_$it/results.json"
touch "$RUN_DIR/converted_checkpoints/iter_$it.done"
"""


@dataclass
class Sweeps:
    stack: AirflowStack
    cluster: LocalCluster
    scheduled: Path  # the config of the two scheduled DAGs
    unscheduled: Path
    demo_dir: Path
    first_interval: date  # the backfills' first daily interval
    overlap_runs: tuple[str, str]  # (manual run id, backfill run id) of OVERLAPPED
    rerun_first: str  # RERUN's first run id

    def run_dir(self, runs: str, experiment: str) -> Path:
        return self.demo_dir / runs / experiment


def _configs(base: Path) -> tuple[Path, Path]:
    trainer, convert = base / "fake_trainer.py", base / "fake_convert.sh"
    trainer.write_text(FAKE_TRAINER)
    convert.write_text(FAKE_CONVERT)
    fakes = (
        ('TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"', f'TRAIN_SCRIPT: "{trainer}"'),
        (
            'template: "{AUTOEXP_CHECKOUT}/include/sbatch/convert_eval_checkpoint.sh"',
            f'template: "{convert}"',
        ),
    )
    (base / "scheduled").mkdir()
    (base / "unscheduled").mkdir()
    scheduled = reduced_config(
        base / "scheduled",
        *fakes,
        ("LR: [3e-3]", "LR: [3e-3, 1e-2]"),
        # Paused until the backfills exist: an unpaused scheduled DAG starts its latest interval at once.
        ("  paused: false\n", '  paused: true\n  schedule: "@daily"\n  start_date: 2026-01-01\n'),
    )
    unscheduled = reduced_config(
        base / "unscheduled",
        *fakes,
        ("dag_id_prefix: demo_", "dag_id_prefix: again_"),
        ('LOGS: "{DEMO_DIR}/runs"', 'LOGS: "{DEMO_DIR}/runs_again"'),
    )
    return scheduled, unscheduled


def backfill(stack: AirflowStack, dag_id: str, first: date, last: date) -> None:
    """``airflow backfill create`` over the daily intervals ``first``..``last``, one run at a time."""
    stack.poll(f"dag {dag_id} to be parsed", lambda: stack._get_or_none(f"dags/{dag_id}"), 120, 2)
    window = ["--from-date", first.isoformat(), "--to-date", last.isoformat(), "--max-active-runs", "1"]
    command = [str(REPO / ".venv/bin/airflow"), "backfill", "create", "--dag-id", dag_id, *window]
    conf = ["--dag-run-conf", json.dumps(PRETRAIN_ONLY)]
    subprocess.run([*command, *conf], check=True, env=stack.env(), capture_output=True, timeout=120)


def runs(stack: AirflowStack, dag_id: str) -> list[dict[str, Any]]:
    return list(stack.api("GET", f"dags/{dag_id}/dagRuns?order_by=logical_date&limit=50")["dag_runs"])


def backfill_runs(stack: AirflowStack, dag_id: str) -> list[dict[str, Any]]:
    return [r for r in runs(stack, dag_id) if r["run_type"] == "backfill"]


@pytest.fixture(scope="module")
def sweeps(slurm_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sweeps]:
    base = tmp_path_factory.mktemp("sweeps")
    scheduled, unscheduled = _configs(base)
    demo_dir = base / "campaign"
    configs = f"{scheduled}:{unscheduled}"
    stack = start_module_stack(base / "home", scheduled, demo_dir, AUTOEXP_CONFIGS=configs)
    try:
        today = datetime.now(UTC).date()
        # Today's midnight is the run an unpaused DAG without catchup starts by itself (Airflow 3's
        # cron trigger timetable: the latest fire time); the backfill's run for it stands for it, so
        # the scheduler adds no run of its own to either DAG.
        latest = today
        first = latest - timedelta(days=2)
        # Everything starts at once; the tests then wait for their own DAG.
        rerun_dir = demo_dir / "runs_again" / "demo_tiny_lr0.003_bs4"
        rerun_dir.mkdir(parents=True)
        (rerun_dir / "fail_convert_40").touch()
        rerun_first = stack.trigger(RERUN, {**PRETRAIN_ONLY, "max_attempts": 1})
        # OVERLAPPED's training runs until both of its runs wait on it (test_two_runs_at_once...):
        # on a loaded machine the second run once started after the 12 s training had ended.
        overlap_dir = demo_dir / "runs" / "demo_tiny_lr0.01_bs4"
        overlap_dir.mkdir(parents=True)
        (overlap_dir / "hold").touch()
        backfill(stack, BACKFILLED, first, latest)
        backfill(stack, OVERLAPPED, latest, latest)
        manual = stack.trigger(OVERLAPPED, PRETRAIN_ONLY)
        for dag_id in (BACKFILLED, OVERLAPPED):
            stack.api("PATCH", f"dags/{dag_id}", {"is_paused": False})
        (overlap_backfill,) = backfill_runs(stack, OVERLAPPED)
        for run_id in (manual, overlap_backfill["dag_run_id"]):  # both wait on the one training job
            stack.wait_task_state(OVERLAPPED, run_id, "pretrain.train", {"deferred"}, timeout=600)
        (overlap_dir / "hold").unlink()
        yield Sweeps(
            stack,
            slurm_cluster,
            scheduled,
            unscheduled,
            demo_dir,
            first,
            (manual, overlap_backfill["dag_run_id"]),
            rerun_first,
        )
    finally:
        stack.stop()


def jobs(s: Sweeps, name: str) -> list[tuple[str, str]]:
    """(job id, state) of every job called ``name`` (names are unique to this module's run folders)."""
    return [(row[0], row[2].split()[0]) for row in sacct_rows(s.cluster, name) if row[1] == name]


def wait_all(s: Sweeps, dag_id: str, run_ids: list[str]) -> list[str]:
    return [s.stack.wait_run(dag_id, r, timeout=600, poll=3) for r in run_ids]


def checkpoints_intact(run_dir: Path) -> None:
    ckpt = run_dir / "checkpoints"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "40"
    for it in (20, 40):
        with zipfile.ZipFile(ckpt / f"iter_{it:07d}" / "mp_rank_00" / "model_optim_rng.pt") as zf:
            assert zf.testzip() is None


def test_a_backfill_over_three_intervals_trains_once_and_sweeps_after(sweeps: Sweeps) -> None:
    s = sweeps
    s.stack.poll("3 backfill runs", lambda: len(backfill_runs(s.stack, BACKFILLED)) == 3 or None, 60)
    bf = backfill_runs(s.stack, BACKFILLED)
    assert [r["logical_date"][:10] for r in bf] == [
        (s.first_interval + timedelta(days=d)).isoformat() for d in range(3)
    ]
    ids = [r["dag_run_id"] for r in bf]
    assert wait_all(s, BACKFILLED, ids) == ["success"] * 3, [s.stack.task_states(BACKFILLED, r) for r in ids]
    bf = backfill_runs(s.stack, BACKFILLED)
    # One sweep per interval, in order (--max-active-runs 1): each starts after the one before ended.
    for before, after in itertools.pairwise(bf):
        assert before["end_date"] <= after["start_date"], bf
    train = job_name(s.scheduled, s.demo_dir, dag_id=BACKFILLED)
    assert [state for _, state in jobs(s, train)] == ["COMPLETED"]
    logs = [s.stack.task_log(BACKFILLED, r, "pretrain.train") for r in ids]
    assert SUBMITTED in logs[0], logs[0][-3000:]
    for later in logs[1:]:
        assert DONE in later, later[-3000:]
        assert SUBMITTED not in later, later[-3000:]
    for it in (20, 40):
        convert = job_name(s.scheduled, s.demo_dir, "pretrain", "convert_eval", it, BACKFILLED)
        assert [state for _, state in jobs(s, convert)] == ["COMPLETED"], convert
    checkpoints_intact(s.run_dir("runs", "demo_tiny_lr0.003_bs4"))
    # The last sweep submitted no training, yet its report has the losses: read from the logs of
    # the attempts earlier runs made (the train task of a sweep returns no attempts).
    assert "pretrain: trained in earlier runs; losses from their 1 log(s)" in s.stack.task_log(
        BACKFILLED, ids[-1], "report"
    )
    table = s.run_dir("runs", "demo_tiny_lr0.003_bs4") / "report" / "report.csv"
    rows = csv.DictReader(table.open())
    losses = [(r["iteration"], r["train_loss"]) for r in rows if r["phase"] == "pretrain"]
    assert losses == [("20", "4.8"), ("40", "4.6")], losses  # FAKE_TRAINER's 5 - it / 100


def test_two_runs_at_once_share_one_training_job(sweeps: Sweeps) -> None:
    s = sweeps
    manual, backfilled = s.overlap_runs
    states = wait_all(s, OVERLAPPED, [manual, backfilled])
    assert states == ["success", "success"], [s.stack.task_states(OVERLAPPED, r) for r in s.overlap_runs]
    train = job_name(s.scheduled, s.demo_dir, dag_id=OVERLAPPED)
    assert [state for _, state in jobs(s, train)] == ["COMPLETED"], jobs(s, train)
    logs = [s.stack.task_log(OVERLAPPED, r, "pretrain.train") for r in (manual, backfilled)]
    submitted = [log for log in logs if SUBMITTED in log]
    assert len(submitted) == 1, [log[-2000:] for log in logs]
    (other,) = [log for log in logs if SUBMITTED not in log]
    # The second run found the first one's job by name: in squeue before submitting, or under the lock.
    assert "re-attaching to active Slurm job" in other or "adopted active Slurm job" in other, other[-3000:]
    checkpoints_intact(s.run_dir("runs", "demo_tiny_lr0.01_bs4"))


def test_a_rerun_after_a_failed_conversion_runs_only_what_is_missing(sweeps: Sweeps) -> None:
    s = sweeps
    assert s.stack.wait_run(RERUN, s.rerun_first, timeout=600, poll=3) == "failed"
    first = s.stack.task_states(RERUN, s.rerun_first)
    assert first["pretrain.train"] == "success", first
    run_dir = s.run_dir("runs_again", "demo_tiny_lr0.003_bs4")
    (run_dir / "fail_convert_40").unlink()
    train = job_name(s.unscheduled, s.demo_dir)
    convert = [job_name(s.unscheduled, s.demo_dir, "pretrain", "convert_eval", it) for it in (20, 40)]
    before = {name: jobs(s, name) for name in (train, *convert)}
    assert [st for _, st in before[convert[1]]] == ["FAILED", "FAILED"], before  # the try and its retry
    again = s.stack.trigger(RERUN, {**PRETRAIN_ONLY, "max_attempts": 1})
    assert s.stack.wait_run(RERUN, again, timeout=600, poll=3) == "success", s.stack.task_states(RERUN, again)
    assert len(before[train]) == 1, before
    assert jobs(s, train) == before[train], before  # no training submitted
    assert jobs(s, convert[0]) == before[convert[0]], before  # converted already: nothing submitted
    assert [st for _, st in jobs(s, convert[1])] == ["FAILED", "FAILED", "COMPLETED"]
    log = s.stack.task_log(RERUN, again, "pretrain.train")
    assert DONE in log, log[-3000:]
    assert SUBMITTED not in log, log[-3000:]
    assert (run_dir / "converted_checkpoints" / "iter_40.done").exists()
