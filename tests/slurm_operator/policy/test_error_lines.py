"""A job log's error lines: its first error line, then its last lines that are not launcher
boilerplate (srun's by default; a launcher's patterns are the caller's)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.model.ledger import Attempt, Verdict
from slurm_operator.model.records import LogChunk, RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.policy import resubmission
from slurm_operator.policy.error_lines import (
    GAP,
    GENERIC,
    LogPatterns,
    boilerplate_lines,
    error_lines,
    error_text,
)

DATA = Path(__file__).parent / "data" / "error_lines"


@pytest.mark.parametrize(
    ("log", "last", "expected"),
    [
        # srun's step report and blank lines are left out; the exception line is among the last lines
        (
            "srun_exit.log",
            3,
            [
                '  File "/home/u/job.py", line 12, in <module>',
                '    raise ValueError("bad input row 17")',
                "ValueError: bad input row 17",
            ],
        ),
        (
            "srun_exit.log",
            20,
            [
                "step 1 done",
                "step 2 done",
                "Traceback (most recent call last):",
                '  File "/home/u/job.py", line 12, in <module>',
                '    raise ValueError("bad input row 17")',
                "ValueError: bad input row 17",
            ],
        ),
        # Slurm's own reason stays (it is the cause); the step's shutdown lines go
        (
            "time_limit.log",
            20,
            [
                "epoch 3 step 100",
                "epoch 3 step 200",
                "slurmstepd: error: *** JOB 913 ON node002 CANCELLED AT 2026-12-01T03:00:07 DUE TO TIME "
                "LIMIT ***",
            ],
        ),
        # no error line and no boilerplate: the last lines, as before
        ("plain.log", 20, [f"line {i}" for i in range(11, 31)]),
    ],
)
def test_error_lines_of_real_looking_tails(log: str, last: int, expected: list[str]) -> None:
    assert error_lines((DATA / log).read_text(), last=last) == expected


@pytest.mark.parametrize(
    ("line", "is_error"),
    [
        ("AssertionError: found NaN in local grad norm", True),
        ("[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered", True),
        ("loss is nan at iteration 120", True),
        ("iteration 120 | lm loss: NaN |", True),
        ("NCCL error in: ProcessGroupNCCL.cpp:1970", True),
        ("number of nan iterations:   0 |", False),  # a count of zero NaNs is no NaN
        ("number of nan iterations:   3 |", True),
        ("Nanotron-like banana stats", False),
        ("error_handler ready", False),
        ("step 5 done", False),
    ],
)
def test_what_an_error_line_is(line: str, is_error: bool) -> None:
    text = f"start\n{line}\n" + "".join(f"tail {i}\n" for i in range(3))
    assert (error_lines(text, last=3)[:1] == [line]) is is_error


def test_a_traceback_frames_source_line_is_never_the_error_line() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    log.error('about to fail')\n"
        "KeyError: 'lr'\n"
        "a\nb\n"
    )
    assert error_lines(text, last=2) == ["KeyError: 'lr'", "a", "b"]
    assert error_lines(text + "c\n", last=2) == ["KeyError: 'lr'", GAP, "b", "c"]


def test_the_callers_boilerplate_may_span_lines() -> None:
    launcher = LogPatterns().with_boilerplate([r"^BEGIN REPORT\n(?:.*\n)*?END REPORT$"])
    text = "work\nValueError: x\nBEGIN REPORT\nanything\nError: boilerplate\nEND REPORT\n"
    assert boilerplate_lines(text, launcher) == {2, 3, 4, 5}
    assert error_lines(text, launcher) == ["work", "ValueError: x"]
    assert error_lines(text, GENERIC) == ["work", "ValueError: x", *text.splitlines()[2:]]


def test_empty_and_only_boilerplate_logs() -> None:
    assert error_lines("") == []
    assert error_text("srun: error: n1: task 0: Exited with exit code 1\n\n") == ""
    assert error_lines("ValueError: x\nok\n", last=0) == ["ValueError: x"]


class _OneLog:
    """The two hook calls ``read_tail`` makes, answered from one local file."""

    def __init__(self, text: str) -> None:
        self.text = text

    def stat(self, path: str) -> RemoteStat:
        return RemoteStat(path, True, size=len(self.text))

    def read_log(self, path: str, offset: int, length: int) -> LogChunk:
        return LogChunk(self.text[offset : offset + length], offset, offset + length)


def test_the_operators_failure_error_shows_the_error_lines() -> None:
    hook: Any = _OneLog((DATA / "srun_exit.log").read_text())
    attempt = replace(Attempt(1, "812", "/l/812.out", ""), state=SlurmState.FAILED, exit_code=1)
    decision = resubmission.Decision(Verdict.FAIL, "job ended FAILED")
    message = resubmission.failure_message(hook, attempt, decision)
    assert message.endswith(
        "log /l/812.out; last 20 lines:\nstep 1 done\nstep 2 done\nTraceback (most recent call last):\n"
        '  File "/home/u/job.py", line 12, in <module>\n    raise ValueError("bad input row 17")\n'
        "ValueError: bad input row 17"
    ), message
    # the caller's launcher patterns are used
    quiet = LogPatterns().with_boilerplate([r"^step \d+ done$"])
    assert "step 1" not in resubmission.failure_message(hook, attempt, decision, quiet)
