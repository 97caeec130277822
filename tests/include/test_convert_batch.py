"""A phase's shared conversion job (CKPT_SERIES): which checkpoints it takes, run for real with bash.

No Slurm: the convert template runs as a plain script in a temp folder, with a stand-in PYTHON that
records each conversion-and-evaluation call and writes what the real one leaves (the HF folder, the
results). The series rule is held to ``plan.expected_checkpoints`` by one table.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from autoexp.campaign.planning.dag_plan import SERIES_VAR, checkpoint_series
from autoexp.campaign.planning.plan import expected_checkpoints, plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings
from tests.autoexp.campaign.planning.jobs import campaign
from tests.fixtures import checkpoint_layouts as layouts
from tests.include.templates import CONVERT, INCLUDE, demo_params, render

HELPERS = INCLUDE / "helpers"

# A stand-in for "$PYTHON -u -m autoexp_cluster.convert_eval ...": one line per call in CALLS;
# FAIL_ITER's conversion fails; converting SPAWN_AT saves SPAWN_ITER (a checkpoint written while the
# job runs); each conversion takes FAKE_SECONDS; a good one writes the results (--output).
FAKE_PYTHON = r"""#!/bin/bash
module="$3"; shift 3
echo "$module $*" >> "$CALLS"
case "$module" in
    autoexp_cluster.convert_eval)
        load="$2"; save="$4"; output="${10}"
        sleep "${FAKE_SECONDS:-0}"
        if [ "${load##*/}" = "${FAIL_ITER:-none}" ]; then echo "conversion broke" >&2; exit 7; fi
        mkdir -p "$save"
        if [ "${load##*/}" = "${SPAWN_AT:-none}" ]; then
            new="${load%/*}/$SPAWN_ITER"
            mkdir -p "$new"; printf 'm' > "$new/.metadata"
            printf '{"sharded_backend": "torch_dist"}' > "$new/metadata.json"
            echo "$((10#${SPAWN_ITER#iter_}))" > "${load%/*}/latest_checkpointed_iteration.txt"
        fi
        mkdir -p "$(dirname "$output")"; echo '{"results": {}}' > "$output" ;;
esac
"""


def batch_iters(run: Path, series: str) -> list[int]:
    script = f"source {HELPERS / 'ckpt_lib.sh'}; source {HELPERS / 'convert_batch.sh'}; "
    script += 'autoexp_batch_iters "$1" $2'
    proc = subprocess.run(
        ["bash", "-c", script, "-", str(run), series], capture_output=True, text=True, timeout=60, check=True
    )
    return [int(word) for word in proc.stdout.split()]


@pytest.mark.parametrize(
    ("start", "every", "last"), [(0, 4, 10), (0, 5, 10), (8, 4, 13), (0, 3, 3), (4, 4, 5)]
)
def test_the_series_is_the_planned_checkpoints(tmp_path: Path, start: int, every: int, last: int) -> None:
    """Every iteration 1..last+2 saved: the job takes exactly the phase's planned checkpoints (what
    the planner makes a task for), given the series the planner puts in its environment."""
    pretrain = plan_campaign(campaign(exps=("a",), branches={}), AirflowSettings())[0].pretrain
    phase = dataclasses.replace(
        pretrain,
        start_iter=start,
        save_interval=every,
        train_iters=last,
        checkpoints=expected_checkpoints(start, last, every),
    )
    ckpts = tmp_path / "run" / "checkpoints"
    for it in range(1, last + 3):
        layouts.torch_dist(ckpts, it, tracker=False)
    layouts.set_tracker(ckpts, last + 2)
    assert batch_iters(tmp_path / "run", checkpoint_series(phase)[SERIES_VAR]) == list(phase.checkpoints)


def test_the_series_leaves_out_what_is_done_or_not_ready(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for it in (4, 8):
        layouts.torch_dist(run / "checkpoints", it)
    layouts.torch_dist(run / "checkpoints", 12, stop_before=".metadata", tracker=False)  # being saved
    (run / "converted_checkpoints").mkdir()
    (run / "converted_checkpoints" / "iter_4.done").touch()
    assert batch_iters(run, "0 4 12") == [8]


@pytest.mark.parametrize("series", ["", "4 8", "0 0 8", "0 4 8 12", "-1 4 8", "0 04 8", "a b c"])
def test_a_bad_series_is_refused(series: str) -> None:
    script = f'source {HELPERS / "convert_batch.sh"}; autoexp_series_check "$1"'
    assert subprocess.run(["bash", "-c", script, "-", series], check=False).returncode == 1


def test_the_good_series_passes() -> None:
    script = f'source {HELPERS / "convert_batch.sh"}; autoexp_series_check "$1"'
    assert subprocess.run(["bash", "-c", script, "-", "0 400 2000"], check=False).returncode == 0


class Job:
    """The convert template rendered for a run folder, with the stand-in PYTHON."""

    def __init__(self, tmp: Path) -> None:
        self.logs, self.run = tmp / "logs", tmp / "logs" / "exp"
        python = tmp / "python"
        python.write_text(FAKE_PYTHON)
        python.chmod(0o755)
        params = demo_params(self.logs, tmp / "data", tmp / "tok", PYTHON=str(python))
        self.script = render(CONVERT, params, tmp / "convert.sbatch")
        self.calls = tmp / "calls"
        self.calls.touch()

    def checkpoints(self, *iterations: int) -> None:
        for it in iterations:
            layouts.torch_dist(self.run / "checkpoints", it)

    def __call__(self, series: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(self.script)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={"PATH": "/usr/bin:/bin", "CKPT_SERIES": series, "CALLS": str(self.calls), **env},
        )

    def converted(self) -> list[int]:
        calls = [line.split() for line in self.calls.read_text().splitlines()]
        return [int(Path(c[c.index("--load") + 1]).name.removeprefix("iter_")) for c in calls]

    def done(self) -> list[int]:
        marks = (self.run / "converted_checkpoints").glob("iter_*.done")
        return sorted(int(p.name[5:-5]) for p in marks)


def test_one_job_converts_every_ready_planned_checkpoint_not_done(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.checkpoints(4, 6, 8)  # 6: saved off the series (a time limit's save): no task's
    (job.run / "converted_checkpoints").mkdir(parents=True)
    (job.run / "converted_checkpoints" / "iter_4.done").touch()  # an earlier job's
    proc = job("0 4 12", SPAWN_AT="iter_0000008", SPAWN_ITER="iter_0000012")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # 12 was saved while the job converted 8: the same job takes it; 4 is not converted again.
    assert job.converted() == [8, 12]
    assert job.done() == [4, 8, 12]
    assert (job.run / "eval_results" / "iter_12" / "results.json").stat().st_size > 0
    assert not list((job.run / "in_progress_checkpoints").glob("*.lock"))
    # A second job finds nothing left.
    proc = job("0 4 12")
    assert proc.returncode == 0
    assert job.converted() == [8, 12]


def test_a_failed_checkpoint_fails_no_other_and_is_left_to_the_next_job(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.checkpoints(4, 8)
    proc = job("0 4 8", FAIL_ITER="iter_0000004")
    # Exit 0: each task judges its own checkpoint by its marker, 8's task must not fail for 4.
    assert proc.returncode == 0, proc.stderr
    assert job.done() == [8]
    assert "iter 4 FAILED" in proc.stderr
    assert (job.run / "in_progress_checkpoints" / "iter_4.failures").read_text().count("\n") == 1
    proc = job("0 4 8")  # the next job retries it
    assert job.done() == [4, 8]
    assert job.converted() == [4, 8, 4]


def test_a_bad_series_stops_the_job_before_any_work(tmp_path: Path) -> None:
    job = Job(tmp_path)
    job.checkpoints(4)
    proc = job("0 0 4")
    assert proc.returncode == 2
    assert "CKPT_SERIES must be 'START INTERVAL LAST'" in proc.stderr
    assert job.converted() == []
