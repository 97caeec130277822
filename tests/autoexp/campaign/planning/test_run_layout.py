"""The run-folder layout: the paths the templates write, and its shell snippets run against real folders."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from autoexp_cluster.ckpt_check import ROLLBACKS

from autoexp.campaign.planning import run_layout
from tests.fixtures.scripts import REPO
from tests.support.rollbacks import roll_back

TRAIN_TEMPLATE = REPO / "include" / "sbatch" / "train_container_simple.sh"


def test_checkpoint_dir_is_what_the_training_template_saves_to() -> None:
    text = TRAIN_TEMPLATE.read_text()
    assert (
        re.search(r'^CHECKPOINT_PATH="\$RUN_DIR/([^"]+)"$', text, re.M).group(1)
        == run_layout.CHECKPOINTS_SUBDIR
    )  # type: ignore[union-attr]
    assert '--save "$CHECKPOINT_PATH"' in text
    assert run_layout.checkpoint_dir("/runs/a/") == "/runs/a/checkpoints"


def test_every_path_of_a_run_and_its_staging_folder() -> None:
    run, out = "/runs/a", "/runs/a/slurm_train.out"
    assert (
        run_layout.tracker_path("/runs/a/checkpoints")
        == "/runs/a/checkpoints/latest_checkpointed_iteration.txt"
    )
    assert run_layout.results_path(run, 40) == "/runs/a/eval_results/iter_40/results.json"
    assert run_layout.results_template("/r/{x}") == "/r/{{x}}/eval_results/iter_{iteration}/results.json"
    assert (
        run_layout.results_template("/r/{x}").format(iteration=7) == "/r/{x}/eval_results/iter_7/results.json"
    )
    assert run_layout.done_marker(run, 40) == "/runs/a/converted_checkpoints/iter_40.done"
    assert run_layout.report_dir(run) == "/runs/a/report"
    assert run_layout.train_output(out, run) == "/runs/a/slurm_train-%j.out"
    assert run_layout.train_output("", run) == "/runs/a/train-%j.out"
    assert run_layout.convert_output("/runs/a/conv.out", run, 8) == "/runs/a/conv-iter8-%j.out"
    assert run_layout.script_path("/stage/", "job") == "/stage/scripts/job.sbatch"
    assert run_layout.script_copy(out, "job") == "/runs/a/job.sbatch"
    assert run_layout.script_copy("x.out", "job") == ""
    assert run_layout.outcome_path("/stage/state", "manual__1", "pretrain", "failed") == (
        "/stage/state/manual__1/pretrain.failed"
    )


def test_shell_snippets_against_a_real_folder(tmp_path: Path) -> None:
    ckpt = tmp_path / "run dir" / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / run_layout.TRACKER_FILE).write_text("40\n")

    def sh(cmd: str) -> str:
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, check=True).stdout.strip()

    assert sh(run_layout.tracker_reached(str(ckpt), 40)) == "1"
    assert sh(run_layout.tracker_reached(str(ckpt), 41)) == "0"
    assert sh(run_layout.tracker_value(str(ckpt))) == "40"
    run = str(tmp_path / "run dir")
    assert sh(run_layout.marker_exists(run, 40)) == "0"
    Path(run_layout.done_marker(run, 40)).parent.mkdir()
    Path(run_layout.done_marker(run, 40)).touch()
    Path(run_layout.results_path(run, 40)).parent.mkdir(parents=True)
    Path(run_layout.results_path(run, 40)).write_text("{}")
    assert sh(run_layout.marker_exists(run, 40)) == "1"
    assert sh(run_layout.done_when_all_done([run_layout.marker_exists(run, 40), "echo 0"])) == "0"
    assert sh(run_layout.done_when_all_done([run_layout.marker_exists(run, 40), "echo 1"])) == "1"
    # A training is done when the tracker reached TRAIN_ITERS and the YAML's own check (if any) agrees.
    assert run_layout.training_done(str(ckpt), 40) == run_layout.tracker_reached(str(ckpt), 40)
    assert sh(run_layout.training_done(str(ckpt), 40, also="echo 1")) == "1"
    assert sh(run_layout.training_done(str(ckpt), 40, also="echo 0")) == "0"
    assert sh(run_layout.training_done(str(ckpt), 41, also="echo 1")) == "0"


def test_attempt_logs_are_every_job_s_log_of_the_training_oldest_first() -> None:
    pattern = run_layout.train_output("/runs/exp/logs/train.out", "/runs/exp")
    names = ["train-12.out", "train-9.out", "train-x.out", "train-12.out.bak", "convert-3.out", "train-.out"]
    expected = ["/runs/exp/logs/train-9.out", "/runs/exp/logs/train-12.out"]
    assert run_layout.attempt_logs(pattern, names) == expected


def test_rollbacks_are_printed_until_claimed_and_claimed_once(tmp_path: Path) -> None:
    """The record ckpt_check writes (its real ``heal``), read by the snippets as the cluster's shell
    runs them (``sh``): the trigger's look changes nothing, the task's claim prints each line once."""
    assert run_layout.ROLLBACKS_FILE == ROLLBACKS
    ckpt = tmp_path / "run dir" / "checkpoints"
    look, claim = (run_layout.rollbacks_unalerted(str(ckpt), claim=c) for c in (False, True))

    def sh(cmd: str) -> str:
        return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout

    ckpt.mkdir(parents=True)
    assert (sh(look), sh(claim)) == ("", "")  # no rollback yet: nothing, and nothing written
    assert not Path(run_layout.rollbacks_path(str(ckpt)) + ".alerted").exists()
    first = roll_back(ckpt, 10, 20)
    assert sh(look) == sh(look) == f"{first}\n"
    assert sh(claim) == f"{first}\n"
    assert (sh(look), sh(claim)) == ("", "")  # a retry, a clear, another run: nothing new
    second = roll_back(ckpt, 30, 40, minute=1)
    assert sh(look) == f"{second}\n"
    # Two tasks claiming at once (runs sharing the job): each line comes out of one of them.
    both = [subprocess.Popen(["sh", "-c", claim], stdout=subprocess.PIPE, text=True) for _ in range(2)]
    assert sorted(p.communicate()[0] for p in both) == ["", f"{second}\n"]
    assert (sh(look), sh(claim)) == ("", "")
