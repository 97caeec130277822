"""No checkpoint the training saved complete is skipped: not when it stops, not when it succeeds, and a
clear of a stopped training converts the rest (issue 26, items 1 and 3).

The reduced demo's pretraining with stand-ins for the trainer (writes legacy checkpoints shaped like
``torch.save`` files, as Megatron orders them: the iteration's files, then the tracker) and for the
conversion (writes the marker and results the completion check reads): what is under test is the
orchestration, not Megatron. ``checkpoint_settle_secs`` is 15 s, so a stop or a success that comes
right after a save finds that checkpoint still settling: the window the waits once skipped it in.
The first success starts from a corrupt newest checkpoint: the template's ckpt_check sets it aside,
and the rollback is alerted exactly once (issue 28), though the triggerer ends such successes.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, job_name, reduced_config, sacct_names, start_module_stack
from tests.fixtures.airflow_stack import AirflowStack
from tests.fixtures.slurm_cluster import LocalCluster
from tests.fixtures.stack_api import xcom

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]

TRAIN = "pretrain.train"
PRETRAIN_ONLY = {"phases": ["pretrain"], "max_attempts": 1}
# Runs that succeed right after their last save: the race of item 1 had one in ten lose a checkpoint
# (3 of 3 converted when measured; the unit tests of the checkpoint wait pin the rule itself).
SUCCESS_RUNS = 2

# The stand-in trainer: saves every --save-interval from the tracker on up to --train-iters; with
# the flag file "stop-after-first" next to it, it saves once more and then sleeps (a user stops it).
STAND_IN_TRAINER = """
import sys, time, zipfile
from pathlib import Path

def arg(name):
    return sys.argv[sys.argv.index(name) + 1]

save, total, every = Path(arg("--save")), int(arg("--train-iters")), int(arg("--save-interval"))
tracker = save / "latest_checkpointed_iteration.txt"
start = int(tracker.read_text()) if tracker.exists() else 0
stop_after_first = (Path(__file__).parent / "stop-after-first").exists()
for it in range(start + every, total + 1, every):
    time.sleep(2)
    rank = save / f"iter_{it:07d}" / "mp_rank_00"
    rank.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(rank / "model_optim_rng.pt", "w") as zf:
        zf.writestr("archive/data.pkl", b"weights" * 64)
        zf.writestr("archive/version", "3\\n")
    tracker.write_text(f"{it}\\n")
    print(f"saved checkpoint at iteration {it}", flush=True)
    if stop_after_first:
        time.sleep(900)
print("after training is done", flush=True)
"""

# The stand-in conversion: the marker and the results the completion check reads (run_layout).
STAND_IN_CONVERT = """#!/bin/bash
#SBATCH --time={CONVERT_TIME}
#SBATCH --output={output_file}
#SBATCH --open-mode=append
#SBATCH --job-name={name}
set -euo pipefail
ITER=$((10#$CKPT_ITER))
mkdir -p "{RUN_DIR}/converted_checkpoints" "{RUN_DIR}/eval_results/iter_$ITER"
echo '{{"results": {{"stand-in": {{"acc": 0.5}}}}}}' > "{RUN_DIR}/eval_results/iter_$ITER/results.json"
touch "{RUN_DIR}/converted_checkpoints/iter_$ITER.done"
echo "converted iteration $ITER"
"""


@dataclass
class Campaign:
    stack: AirflowStack
    cluster: LocalCluster
    run_dir: Path
    stand_in: Path
    train_job: str


@pytest.fixture(scope="module")
def campaign(slurm_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    base = tmp_path_factory.mktemp("checkpoints-kept")
    trainer = base / "stand_in" / "train.py"
    trainer.parent.mkdir()
    trainer.write_text(STAND_IN_TRAINER)
    convert = base / "convert_stand_in.sh"
    convert.write_text(STAND_IN_CONVERT)
    script = 'TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"'
    template = 'template: "{AUTOEXP_CHECKOUT}/include/sbatch/convert_eval_checkpoint.sh"'
    config = reduced_config(
        base,
        (script, f'TRAIN_SCRIPT: "{trainer}"'),
        (template, f'template: "{convert}"'),
        ("checkpoint_settle_secs: 2", "checkpoint_settle_secs: 15"),
    )
    demo_dir = base / "campaign"
    stack = start_module_stack(base / "home", config, demo_dir)
    try:
        run_dir = demo_dir / "runs" / "demo_tiny_lr0.003_bs4"
        yield Campaign(stack, slurm_cluster, run_dir, trainer.parent, job_name(config, demo_dir))
    finally:
        stack.stop()


def states(stack: AirflowStack, run_id: str) -> dict[tuple[str, int], str | None]:
    tis = stack.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    return {(t["task_id"], t["map_index"]): t["state"] for t in tis}


def converted(run_dir: Path) -> list[int]:
    return sorted(int(p.name[5:-5]) for p in (run_dir / "converted_checkpoints").glob("iter_*.done"))


def tracker(run_dir: Path) -> str:
    path = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    return path.read_text().strip() if path.exists() else ""


def until(what: str, check: Callable[[], Any], limit_s: float, stack: AirflowStack) -> float:
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > limit_s:
            raise AssertionError(f"{what}: not within {limit_s} s; stack logs:\n{stack.log_tail()}")
        stack.check_alive()
        time.sleep(0.5)
    return time.monotonic() - start


def test_a_stop_keeps_the_checkpoint_saved_before_it_and_a_clear_converts_the_rest(
    campaign: Campaign, figure: Callable[[str], None]
) -> None:
    c, stack = campaign, campaign.stack
    (c.stand_in / "stop-after-first").touch()
    run_id = stack.trigger(DAG_ID, PRETRAIN_ONLY, timeout=300)
    until("iteration 20 saved", lambda: tracker(c.run_dir) == "20", 300, stack)
    time.sleep(5)  # complete 5 s ago, still settling (15 s)
    marked = time.monotonic()
    stack.set_task_state(DAG_ID, run_id, TRAIN, "failed")
    assert stack.wait_run(DAG_ID, run_id, timeout=300, poll=2) == "failed"
    ended = states(stack, run_id)
    assert ended[("pretrain.checkpoints.wait", 0)] == "success", ended  # iteration 20: kept
    assert ended[("pretrain.checkpoints.convert_eval", 0)] == "success", ended
    assert ended[("pretrain.checkpoints.wait", 1)] == "skipped", ended  # 40 never saved
    assert converted(c.run_dir) == [20]
    figure(
        f"stop 5 s after a save: iteration 20 converted, run ended {time.monotonic() - marked:.1f} s later"
    )

    # Clear = resume: the training the UI's way (downstream included), the stop marker still there.
    (c.stand_in / "stop-after-first").unlink()
    cleared = time.monotonic()
    stack.clear_task(DAG_ID, run_id, TRAIN)
    assert stack.wait_run(DAG_ID, run_id, timeout=600, poll=2) == "success", states(stack, run_id)
    assert converted(c.run_dir) == [20, 40]
    jobs = sacct_names(c.cluster, c.train_job)
    assert [line.rsplit("|", 1)[1].split()[0] for line in jobs] == ["CANCELLED", "COMPLETED"], jobs
    figure(f"clear after the stop: run green, 20 and 40 converted in {time.monotonic() - cleared:.1f} s")


def test_a_training_that_succeeds_while_its_last_checkpoint_settles_gets_it_converted(
    campaign: Campaign, figure: Callable[[str], None]
) -> None:
    c, stack = campaign, campaign.stack
    seconds = []
    ckpts = c.run_dir / "checkpoints"
    records: dict[str, str] = {}  # ckpt_check's rollback record and its alerted copy, kept across runs
    for run in range(SUCCESS_RUNS):
        for folder in ("checkpoints", "converted_checkpoints", "eval_results"):
            shutil.rmtree(c.run_dir / folder, ignore_errors=True)
        ckpts.mkdir(parents=True)
        for name, text in records.items():
            (ckpts / name).write_text(text)
        if run == 0:  # a save killed before it wrote anything: set aside, the training starts over
            (ckpts / "iter_0000010").mkdir()
            (ckpts / "latest_checkpointed_iteration.txt").write_text("10\n")
        started = time.monotonic()
        run_id = stack.trigger(DAG_ID, PRETRAIN_ONLY, timeout=300)
        assert stack.wait_run(DAG_ID, run_id, timeout=600, poll=2) == "success", states(stack, run_id)
        assert converted(c.run_dir) == [20, 40], states(stack, run_id)
        results = c.run_dir / "eval_results" / "iter_40" / "results.json"
        assert json.loads(results.read_text())["results"]
        seconds.append(round(time.monotonic() - started, 1))
        records = {p.name: p.read_text() for p in ckpts.glob(".autoexp_rollbacks*")}
        # The rollback's success was left to the task process, which alerted it and kept it in the
        # attempt history; the next run's success, with nothing left to alert, ended in the triggerer.
        log = stack.task_log(DAG_ID, run_id, TRAIN)
        assert ("to alert by the task process" in log) is (run == 0), log[-3000:]
        if run == 0:
            history = xcom(stack, DAG_ID, run_id, TRAIN)
            attempts = json.loads(history) if isinstance(history, str) else history
            (rollback,) = attempts[-1]["extra"]["rollbacks"]
            assert " iter_0000010 -> iter_0000010.corrupt-" in rollback, attempts
    alerts = (Path(stack.env()["AIRFLOW_HOME"]) / "logs" / "autoexp-alerts.log").read_text()
    sent = [line for line in alerts.splitlines() if "autoexp ROLLBACK" in line]
    assert len(sent) == 1, alerts
    assert sent[0].endswith(f"task={TRAIN} checkpoint=iter_0000010"), alerts
    figure(
        f"{SUCCESS_RUNS} runs ending right after their last save: every checkpoint converted ({seconds} s); "
        "the first one's rollback alerted once"
    )
