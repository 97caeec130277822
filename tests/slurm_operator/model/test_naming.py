"""Tests for deterministic job names and per-attempt paths."""

from __future__ import annotations

import re

from slurm_operator.model import naming


def test_job_name_is_deterministic_and_distinct_per_task_instance() -> None:
    a = naming.job_name("scaling", "train_1b", "manual__2026-01-01T00:00:00+00:00", 3)
    assert a == naming.job_name("scaling", "train_1b", "manual__2026-01-01T00:00:00+00:00", 3)
    assert a != naming.job_name("scaling", "train_1b", "manual__2026-01-02T00:00:00+00:00", 3)
    assert a != naming.job_name("scaling", "train_1b", "manual__2026-01-01T00:00:00+00:00", 4)
    assert a.startswith("af-scaling-train_1b-m3-")


def test_job_name_is_sanitized_and_bounded() -> None:
    name = naming.job_name("d" * 200, "group.task with spaces/$(rm -rf)", "r;un", None)
    assert len(name) <= naming.MAX_JOB_NAME
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", name)
    assert "-m" not in name.split("-")[-2]
    # Truncation keeps names of different tasks distinct through the digest.
    other = naming.job_name("d" * 200, "group.task with spaces/$(rm -rf)", "r;un2", None)
    assert name[:-10] == other[:-10]
    assert name != other


def test_attempt_paths_and_output_expansion() -> None:
    out = naming.attempt_output_path("/scratch/run/", "af-x")
    assert out == "/scratch/run/af-x-%j.out"
    assert naming.resolve_output_path(out, "42") == "/scratch/run/af-x-42.out"
    assert naming.resolve_output_path("/l/%x.%j.100%%", "7", "nm") == "/l/nm.7.100%"
    assert naming.attempt_script_path("/s", "af-x", 2) == "/s/scripts/af-x.attempt002.sbatch"


def test_a_fatal_marker_reads_back_as_its_rule_and_line_and_no_other_cancel_does() -> None:
    """The trigger and the operator write it, cancels.note_cancel and the campaign report read it."""
    line = "iteration 7/ 100 | lm loss: nan | grad norm: nan |"  # a line with ': ' in it
    marker = naming.fatal_marker("DIVERGED", line)
    assert marker == f"fatal: DIVERGED: {line}"
    assert naming.parse_fatal_marker(marker + "\n") == ("DIVERGED", line)
    for other in (naming.ON_KILL_REASON, naming.TIMEOUT_REASON, "hung: job 3 made no progress", ""):
        assert naming.parse_fatal_marker(other) is None
