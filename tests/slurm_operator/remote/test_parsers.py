"""Parsers against output captured from the local Slurm 22.05 cluster (pure: no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_operator.model.exceptions import (
    SlurmCommandError,
    SlurmParseError,
    SlurmSubmitError,
    SlurmSubmitLimitError,
)
from slurm_operator.model.records import RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.remote import parsers
from slurm_operator.remote.commands import SECTION_MARK

SACCT = """\
1|na|me|FAILED|3:0|00:00:00|2026-11-29T20:14:34|2026-11-29T20:14:34|node18817|billing=1,cpu=1,node=1|None
1.batch|batch|FAILED|3:0|00:00:00|2026-11-29T20:14:34|2026-11-29T20:14:34|node18817|cpu=1|
3|wrap|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned||Dependency
4|wrap|CANCELLED by 0|0:0|00:00:07|2026-11-29T20:15:00|2026-11-29T20:15:07|node18817|cpu=1|None
5|wrap|TIMEOUT|0:0|00:01:21|2026-11-29T20:15:00|2026-11-29T20:16:21|node18817|cpu=1|None
5.batch|batch|CANCELLED|0:15|00:01:21|2026-11-29T20:15:00|2026-11-29T20:16:21|node18817|cpu=1|
2_0|wrap|COMPLETED|0:0|00:00:01|2026-11-29T20:14:34|2026-11-29T20:14:35|node18817|billing=1,cpu=1,node=1|None
2_1|wrap|FAILED|2:0|00:00:01|2026-11-29T20:14:34|2026-11-29T20:14:36|node18817|billing=1,cpu=1,node=1|None
"""

SCONTROL = (
    "JobId=5 ArrayJobId=2 ArrayTaskId=1 JobName=my job UserId=root(0) JobState=COMPLETED Reason=None "
    "ExitCode=0:0 RunTime=00:00:01 StartTime=2026-11-29T20:14:34 EndTime=2026-11-29T20:14:35 "
    "NodeList=node18817 TRES=cpu=1,node=1,billing=1 Power= \n"
    "slurm_load_jobs error: Invalid job id specified\n"
)


def test_parse_sacct() -> None:
    recs = {r.job_id: r for r in parsers.parse_sacct(SACCT)}
    assert list(recs) == ["1", "3", "4", "5", "2_0", "2_1"]  # step rows skipped, array tasks kept
    assert recs["1"].name == "na|me"  # a '|' in the job name does not shift the fields
    assert (recs["1"].state, recs["1"].exit_code, recs["1"].signal) == (SlurmState.FAILED, 3, 0)
    assert recs["1"].alloc_tres == "billing=1,cpu=1,node=1"
    assert (recs["3"].state, recs["3"].exit_code, recs["3"].reason) == (
        SlurmState.PENDING,
        None,
        "Dependency",
    )
    assert recs["3"].start == ""
    assert recs["3"].node_list == ""
    assert recs["4"].state is SlurmState.CANCELLED
    assert (recs["4"].raw_state, recs["4"].cancelled_by_uid) == ("CANCELLED by 0", 0)  # who: read once
    assert recs["5"].state is SlurmState.TIMEOUT


def test_parse_sacct_garbage_is_quoted() -> None:
    with pytest.raises(SlurmParseError, match=r"expected 10 '\|'-separated fields.*'garbage'"):
        parsers.parse_sacct("garbage\n")


def test_parse_squeue() -> None:
    (rec,) = parsers.parse_squeue("3|wrap|PENDING|0:00|N/A|N/A||Dependency\n")
    assert (rec.job_id, rec.state, rec.exit_code, rec.reason) == ("3", SlurmState.PENDING, None, "Dependency")


def test_parse_scontrol() -> None:
    (rec,) = parsers.parse_scontrol(SCONTROL)
    assert (rec.job_id, rec.name, rec.state, rec.exit_code) == ("2_1", "my job", SlurmState.COMPLETED, 0)
    assert rec.alloc_tres == "cpu=1,node=1,billing=1"


def _sections(*parts: tuple[str, int, str]) -> str:
    return "".join(f"{SECTION_MARK} {src} {rc}\n{text}" for src, rc, text in parts)


def test_parse_job_states_sacct_is_authoritative_and_arrays_aggregate() -> None:
    states = parsers.parse_job_states(_sections(("sacct", 0, SACCT)), "", ["1", "2", "3"])
    assert states.source == "sacct"
    assert states.authoritative
    whole = states.records["2"]
    assert (whole.state, whole.exit_code) == (SlurmState.FAILED, 2)
    assert whole.reason.startswith("array of 2 records")


def test_an_array_is_aggregated_even_where_accounting_lists_its_base_id_as_a_row() -> None:
    """A record keyed by the bare array id beside its tasks' is one task's, not the array's: a fresh-clone
    run read a failed array as COMPLETED, exit 0, its tasks' rows saying FAILED (which source listed
    the bare id was not recorded; accounting's row of the task that kept the id is the likely one)."""
    base = "2|wrap|COMPLETED|0:0|00:00:01|2026-11-29T20:14:34|2026-11-29T20:14:37|node18817|cpu=1|None\n"
    states = parsers.parse_job_states(_sections(("sacct", 0, SACCT + base)), "", ["2"])
    whole = states.records["2"]
    assert (whole.state, whole.exit_code) == (SlurmState.FAILED, 2)
    assert whole.reason.startswith("array of 3 records")
    running = base.replace("COMPLETED", "RUNNING")
    running_states = parsers.parse_job_states(_sections(("sacct", 0, SACCT + running)), "", ["2"])
    assert running_states.records["2"].state is SlurmState.RUNNING  # while any of it runs, the array does


def test_parse_job_states_fills_in_from_squeue() -> None:
    out = _sections(("sacct", 0, ""), ("squeue", 0, "9|j|RUNNING|0:05|2026-11-29T20:14:34|N/A|n1|None\n"))
    states = parsers.parse_job_states(out, "", ["9"])
    assert states.records["9"].state is SlurmState.RUNNING
    assert states.authoritative  # sacct answered; squeue only filled in a job not yet recorded


def test_parse_job_states_without_accounting_is_not_authoritative() -> None:
    out = _sections(("sacct", 1, ""), ("squeue", 1, ""), ("scontrol", 0, SCONTROL))
    states = parsers.parse_job_states(out, "sacct: error: Slurm accounting storage is disabled\n", ["2_1"])
    assert (states.source, states.authoritative) == ("scontrol", False)
    assert states.records["2_1"].state is SlurmState.COMPLETED


def test_parse_job_states_purged_job_is_absent_not_finished() -> None:
    out = _sections(("sacct", 1, ""), ("squeue", 1, ""), ("scontrol", 0, ""))
    err = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
    with pytest.raises(SlurmCommandError, match=r"no Slurm command could report jobs 7: .*Unable to contact"):
        parsers.parse_job_states(out, err, ["7"])


def test_parse_job_states_garbage() -> None:
    with pytest.raises(SlurmParseError, match="does not start with a section line"):
        parsers.parse_job_states("bash: sacct: command not found\n", "", ["1"])
    with pytest.raises(SlurmParseError, match="printed nothing"):
        parsers.parse_job_states("", "", ["1"])


def test_parse_sbatch() -> None:
    assert parsers.parse_sbatch("42\n") == "42"
    assert parsers.parse_sbatch("42;cluster\n") == "42"
    with pytest.raises(SlurmParseError, match="printed no job id: 'Submitted batch job 42'"):
        parsers.parse_sbatch("Submitted batch job 42")


def test_submitted_job_is_the_id_or_the_submit_error() -> None:
    assert parsers.submitted_job("sbatch", 0, "42;c\n", "") == "42"
    with pytest.raises(
        SlurmSubmitError, match=r"^sbatch refused: Batch job submission failed: invalid account"
    ):
        parsers.submitted_job(
            "sbatch", 1, "", "sbatch: error: Batch job submission failed: invalid account\n"
        )


def test_submit_errors() -> None:
    reason = "Invalid account or account/partition combination specified"
    err = parsers.submit_error(
        "sbatch --parsable", 1, "", f"sbatch: error: Batch job submission failed: {reason}\n"
    )
    assert type(err) is SlurmSubmitError
    assert str(err) == f"sbatch refused: Batch job submission failed: {reason}"
    limit = (
        "sbatch: error: QOSMaxSubmitJobPerUserLimit\nsbatch: error: Batch job submission failed: Job violates"
    )
    err = parsers.submit_error("sbatch", 1, "", limit)
    assert isinstance(err, SlurmSubmitLimitError)
    assert str(err).startswith("sbatch refused for a submit limit (retry later): QOSMaxSubmitJobPerUserLimit")


def test_exit_code() -> None:
    assert parsers.parse_exit_code("0:15") == (0, 15)
    assert parsers.parse_exit_code("") == (None, None)


def test_parse_job_states_scontrol_completes_a_job_squeue_saw_finish() -> None:
    finished = "2_1|my job|COMPLETED|0:05|2026-11-29T20:14:34|2026-11-29T20:14:39|n1|None\n"
    out = _sections(("sacct", 0, ""), ("squeue", 0, finished), ("scontrol", 0, SCONTROL))
    rec = parsers.parse_job_states(out, "", ["2_1"]).records["2_1"]
    assert (rec.state, rec.exit_code) == (SlurmState.COMPLETED, 0)  # squeue alone has no exit code


def test_parse_watch_marks_unprinted_paths_missing_and_keeps_spaces() -> None:
    text = "1700000100\n1700000000 6 /r/a b.out\n1699999000 0 /r/empty\n"
    now, files = parsers.parse_watch(text, ["/r/a b.out", "/r/empty", "/r/gone"])
    assert now == 1700000100.0
    assert files["/r/a b.out"] == RemoteStat("/r/a b.out", exists=True, size=6, mtime=1700000000.0)
    assert files["/r/empty"].exists
    assert files["/r/gone"] == RemoteStat("/r/gone", exists=False)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "does not start with the remote clock"),
        ("date: not found\n", "does not start with the remote clock"),
        ("1700000100\nstat: cannot stat\n", "expected 'MTIME SIZE PATH'"),
    ],
)
def test_parse_watch_garbage_is_quoted(text: str, message: str) -> None:
    with pytest.raises(SlurmParseError, match=message):
        parsers.parse_watch(text, ["/r/x"])


def test_parse_job_states_takes_clock_and_files_from_the_files_section() -> None:
    out = _sections(("files", 0, "1700000100\n1700000000 6 /r/log\n"), ("sacct", 0, SACCT))
    states = parsers.parse_job_states(out, "", ["1"], ["/r/log"])
    assert states.source == "sacct"  # the files section is no state source
    assert states.authoritative
    assert states.remote_now == 1700000100.0
    assert states.files["/r/log"].size == 6
    assert states.records["1"].state is SlurmState.FAILED


def test_tres_counts_keeps_countable_resources() -> None:
    counts = parsers.tres_counts("billing=4,cpu=4,gres/gpu=2,gres/gpu:h100=2,mem=16G,node=1")
    assert counts == {"billing": 4, "cpu": 4, "gres/gpu": 2, "gres/gpu:h100": 2, "node": 1}
    assert parsers.tres_counts("") == {}


# `commands.job_states` for jobs 1-5 on the local Slurm 22.05: 1 running without a time limit, 2
# held by --dependency=afterok:1, 3 by --begin=now+1hour, 4 and 5 --exclusive behind 1. Accounting
# still says "None" for 4 and 5; squeue --start names the live reason, and backfill's estimate
# (a year on: job 1 has no time limit) or N/A.
PENDING_OUTPUT = (Path(__file__).parent / "data" / "pending" / "job_states.txt").read_text()


def test_parse_job_states_takes_reason_and_estimate_from_squeue_start() -> None:
    states = parsers.parse_job_states(PENDING_OUTPUT, "", ["1", "2", "3", "4", "5"])
    got = {j: (r.state, r.reason, r.expected_start) for j, r in states.records.items()}
    assert got == {
        "1": (SlurmState.RUNNING, "", None),
        "2": (SlurmState.PENDING, "Dependency", None),
        "3": (SlurmState.PENDING, "BeginTime", "2026-12-03T09:55:05"),
        "4": (SlurmState.PENDING, "Resources", "2027-12-03T08:55:05"),
        "5": (SlurmState.PENDING, "Priority", "2027-12-03T08:55:05"),
    }
    assert (states.source, states.authoritative) == ("sacct", True)  # squeue --start only adds to it


def test_a_failed_squeue_start_leaves_accounting_s_reason() -> None:
    out = _sections(("sacct", 0, "3|wrap|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned||Dependency\n"),
                    ("pending", 1, ""))  # fmt: skip
    rec = parsers.parse_job_states(out, "slurm_load_jobs error: Invalid job id specified\n", ["3"]).records[
        "3"
    ]
    assert (rec.reason, rec.expected_start) == ("Dependency", None)


def test_squeue_start_of_a_job_that_started_meanwhile_is_ignored() -> None:
    out = _sections(("sacct", 0, "3|w|RUNNING|0:0|00:00:01|2026-12-03T08:55:05|Unknown|n1|cpu=1|None\n"),
                    ("pending", 0, "3|Priority|2026-12-03T09:00:00\n"))  # fmt: skip
    rec = parsers.parse_job_states(out, "", ["3"]).records["3"]
    assert (rec.state, rec.reason, rec.expected_start) == (SlurmState.RUNNING, "", None)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            "garbage",
            r"expected 3 '\|'-separated fields \(JobID,Reason,StartTime\) from squeue --start.*'garbage'",
        ),
        ("5|Priority|soon", r"expected 'ID\|REASON\|YYYY-MM-DDTHH:MM:SS' \(or N/A\).*'5\|Priority\|soon'"),
        ("5_[1-3]|Priority|N/A", r"expected 'ID\|REASON.*'5_\[1-3\]\|Priority\|N/A'"),
    ],
)
def test_parse_pending_garbage_is_quoted(line: str, message: str) -> None:
    with pytest.raises(SlurmParseError, match=message):
        parsers.parse_pending(f"{line}\n")
    with pytest.raises(SlurmParseError, match=message):
        parsers.parse_job_states(_sections(("sacct", 0, ""), ("pending", 0, f"{line}\n")), "", ["5"])


def test_parse_squeue_keeps_a_pending_job_s_estimate_apart_from_a_start() -> None:
    text = (
        "5|wrap|PENDING|0:00|2027-12-03T08:55:05|2027-12-03T09:00:05||Priority\n"
        "2|wrap|PENDING|0:00|N/A|N/A||Dependency\n"
    )
    pending, held = parsers.parse_squeue(text)
    assert (pending.start, pending.expected_start, pending.reason) == ("", "2027-12-03T08:55:05", "Priority")
    assert (held.start, held.expected_start, held.reason) == ("", None, "Dependency")
