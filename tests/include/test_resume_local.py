"""On the local Slurm cluster, no Airflow: a time limit loses no work; a corrupt checkpoint is rolled back."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.autoexp_cluster.conftest import DemoData
from tests.include.templates import TRAIN, demo_params, render
from tests.include.test_sbatch_local import _tail, wait_done

pytestmark = [pytest.mark.slurm, pytest.mark.ml, pytest.mark.slow]

ITERATION = re.compile(r"iteration\s+(\d+)/")
SAVED = re.compile(r"successfully saved checkpoint from iteration\s+(\d+)")


def sbatch(cluster: Any, script: Path, log: Path, *options: str) -> str:
    log.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["sbatch", "--parsable", *options, str(script)],
        capture_output=True, text=True, env=cluster.env(), timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def elapsed_s(cluster: Any, job_id: str) -> int:
    out = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "ElapsedRaw"],
        capture_output=True, text=True, env=cluster.env(), check=False,
    ).stdout.split()  # fmt: skip
    return int(out[0]) if out and out[0].isdigit() else -1


def job_text(log: Path, job_id: str) -> str:
    """The part of an appended log (``--open-mode=append``) that job ``job_id`` wrote."""
    text = log.read_text(errors="replace")
    start = text.index(f"[autoexp] job {job_id} ")
    return text[start:]


def test_a_time_limit_resubmission_recomputes_no_iteration(
    slurm_cluster: Any, demo_data: DemoData, tmp_path: Path
) -> None:
    """TIME 2:30, exit margin 1 min: the trainer stops itself after a minute (--exit-duration-in-mins
    1: 150 s minus the seconds already run, in whole minutes, minus the margin), saves, exits 0
    (COMPLETED, no TIMEOUT); the resubmission resumes at the next iteration. The job's own --signal
    is set to 5 s on the command line so that this test sees the duration path, not the signal."""
    logs = tmp_path / "logs"
    log = logs / "exp" / "slurm_train.out"
    params = demo_params(
        logs, demo_data.prefix, demo_data.tokenizer, TIME="2:30", JOB_ENV="AUTOEXP_EXIT_MARGIN_MINUTES=1",
        TRAIN_ITERS=1_000_000, LR_DECAY_ITERS=1_000_000, LOG_INTERVAL=1, SAVE_INTERVAL=1_000_000,
    )  # fmt: skip
    script = render(TRAIN, params, tmp_path / "train.sbatch")
    assert "--exit-duration-in-mins" in script.read_text()
    saved: list[int] = []
    first: list[int] = []
    for _ in range(2):
        job = sbatch(slurm_cluster, script, log, "--signal=B:TERM@5")
        assert wait_done(slurm_cluster, job, log, deadline_s=240) == "COMPLETED", _tail(log)
        text = job_text(log, job)
        assert re.search(r"exiting program after \d+(\.\d+)? minutes", text), _tail(log)
        iters = [int(i) for i in ITERATION.findall(text)]
        first.append(iters[0])
        saved.append(int(SAVED.findall(text)[-1]))
        assert saved[-1] == iters[-1]  # nothing computed after the last save
    recomputed = saved[0] - (first[1] - 1)
    print(f"time-limit resubmission: saved {saved}, first iterations {first}, recomputed {recomputed}")
    assert first[0] == 1
    assert recomputed == 0
    assert saved[1] > saved[0]


def test_a_truncated_newest_checkpoint_is_rolled_back_and_the_training_finishes(
    slurm_cluster: Any, demo_data: DemoData, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    run = logs / "exp"
    log = run / "slurm_train.out"
    ckpts = run / "checkpoints"
    common = {"LR_DECAY_ITERS": 30, "LOG_INTERVAL": 1, "SAVE_INTERVAL": 10}
    first = demo_params(logs, demo_data.prefix, demo_data.tokenizer, TRAIN_ITERS=20, **common)
    job = sbatch(slurm_cluster, render(TRAIN, first, tmp_path / "first.sbatch"), log)
    assert wait_done(slurm_cluster, job, log) == "COMPLETED", _tail(log)
    assert (ckpts / "latest_checkpointed_iteration.txt").read_text().strip() == "20"

    victim = ckpts / "iter_0000020" / "mp_rank_00" / "model_optim_rng.pt"
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])  # a save killed mid-write
    fault = time.monotonic()
    rest = demo_params(logs, demo_data.prefix, demo_data.tokenizer, TRAIN_ITERS=30, **common)
    job = sbatch(slurm_cluster, render(TRAIN, rest, tmp_path / "rest.sbatch"), log)
    assert wait_done(slurm_cluster, job, log) == "COMPLETED", _tail(log)
    seconds = time.monotonic() - fault
    text = job_text(log, job)
    lines = [line for line in text.splitlines() if "is corrupt" in line]
    assert len(lines) == 1, _tail(log)
    assert lines[0].startswith(
        "[autoexp] checkpoint iter_0000020 is corrupt (mp_rank_00/model_optim_rng.pt: "
    )
    assert "resuming from iter_0000010 (rollback 1 of at most 2)" in lines[0]
    assert int(ITERATION.findall(text)[0]) == 11
    assert "after training is done" in text
    assert (ckpts / "latest_checkpointed_iteration.txt").read_text().strip() == "30"
    aside = list(ckpts.glob("iter_0000020.corrupt-*"))
    assert len(aside) == 1
    assert (ckpts / ".autoexp_rollbacks").read_text().count("\n") == 1
    cost = elapsed_s(slurm_cluster, job)
    print(f"rollback: {seconds:.1f} s from fault to finished training, {cost} job-seconds")


def test_the_time_limit_signal_makes_the_trainer_save_before_slurm_stops_it(
    slurm_cluster: Any, demo_data: DemoData, tmp_path: Path
) -> None:
    """The template's own `#SBATCH --signal=B:TERM@120`, TIME 3 and no exit margin (the duration would
    be the whole limit): the SIGTERM comes first, the batch shell passes it on, the training saves its
    last iteration and the job ends COMPLETED (exit 0), not TIMEOUT or FAILED."""
    logs = tmp_path / "logs"
    log = logs / "exp" / "slurm_train.out"
    params = demo_params(
        logs, demo_data.prefix, demo_data.tokenizer, TIME=3, JOB_ENV="AUTOEXP_EXIT_MARGIN_MINUTES=0",
        TRAIN_ITERS=1_000_000, LR_DECAY_ITERS=1_000_000, LOG_INTERVAL=1, SAVE_INTERVAL=1_000_000,
    )  # fmt: skip
    job = sbatch(slurm_cluster, render(TRAIN, params, tmp_path / "train.sbatch"), log)
    state = wait_done(slurm_cluster, job, log, deadline_s=300)
    text = job_text(log, job)
    assert "exiting program after receiving signal 15" in text, _tail(log)
    iters = [int(i) for i in ITERATION.findall(text)]
    assert int(SAVED.findall(text)[-1]) == iters[-1]  # nothing computed after the last save
    print(f"signal: state {state}, {elapsed_s(slurm_cluster, job)} s, saved at {iters[-1]}")
    assert state == "COMPLETED", _tail(log)
    assert "[autoexp] stopped at the time limit (training exit " in text
