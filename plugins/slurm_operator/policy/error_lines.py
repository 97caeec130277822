"""The lines of a job's log that say why it ended: its first error line and its last lines that are
not launcher boilerplate.

A job that dies under a launcher ends its log with the launcher's shutdown report (srun's "task 0:
Exited with exit code 1", a distributed launcher's own traceback and failure table): the last 20
lines are then all boilerplate, and the line that ended the job is above them. Pure functions: the
caller passes the log text and the patterns of its launchers (this plugin knows srun's only).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final

TAIL_LINES: Final = 20
FIRST_ERROR_LINES: Final = 5  # at most this many consecutive error lines from the first one
# Stands for the lines left out between the first error line and the last lines; never itself kept,
# so that picking again from a picked text (an alert from an operator's error) adds no second one.
GAP: Final = "[...]"

# Lines srun and slurmstepd print when a step ends (after the job's own error, never the cause);
# blank lines say nothing either. Regexes in multi-line mode, one line each.
SRUN_BOILERPLATE: Final[tuple[str, ...]] = (
    r"^[ \t]*$",
    r"^srun: error: \S+: tasks? [0-9,\-]+: (?:Exited with exit code \d+|Killed|Terminated)[ \t]*$",
    r"^srun: (?:Job step aborted: Waiting up to \d+ seconds for job step to finish\.|"
    r"launch/slurm: _step_signal: .*|Terminating (?:StepId=|job step ).*|"
    r"error: Timed out waiting for job step to complete|Job step \S+ aborted before step completely "
    r"launched\.|forcing job termination|Force Terminated .*)[ \t]*$",
    r"^slurmstepd: error: \*\*\* STEP \S+ ON \S+ CANCELLED AT \S+ \*\*\*[ \t]*$",
)

# An error line: an exception line (``AssertionError: ...``, ``[rank0]: RuntimeError: ...``), the
# word error, or a NaN — not a count of them that is zero ("nan iterations: 0").
ERROR_LINE: Final = (
    r"^(?:\[[^\]\n]*\]:?[ \t]?)?[\w.]*(?:Error|Exception)\b"
    r"|(?i:\berror\b)"
    r"|(?i:\bnan\b)(?![ \t]+\w+:[ \t]*0\b)"
)
_FRAME: Final = re.compile(r'^(?:\[[^\]]*\]:?[ \t]?)?[ \t]+File "[^"]*", line \d+')


@dataclass(frozen=True)
class LogPatterns:
    """What a log's error lines look like, and what its launchers print that is never the cause.

    :param boilerplate: regexes (multi-line mode); every line a match covers is boilerplate. One
        may span several lines (a launcher's own traceback).
    :param error: regex of an error line (searched in each line that is not boilerplate and not
        the source line of a traceback frame).
    """

    boilerplate: tuple[str, ...] = SRUN_BOILERPLATE
    error: str = ERROR_LINE

    def with_boilerplate(self, boilerplate: Sequence[str]) -> LogPatterns:
        """These patterns with more boilerplate (a launcher's)."""
        return LogPatterns((*self.boilerplate, *boilerplate), self.error)


GENERIC: Final = LogPatterns()


@cache
def _compiled(patterns: LogPatterns) -> tuple[tuple[re.Pattern[str], ...], re.Pattern[str]]:
    return tuple(re.compile(p, re.MULTILINE) for p in patterns.boilerplate), re.compile(patterns.error)


def boilerplate_lines(text: str, patterns: LogPatterns = GENERIC) -> set[int]:
    """The indexes (in ``text.splitlines()``) of the lines a boilerplate pattern covers."""
    starts = [0]
    for line in text.splitlines(keepends=True)[:-1]:
        starts.append(starts[-1] + len(line))
    covered: set[int] = set()
    for pattern in _compiled(patterns)[0]:
        for match in pattern.finditer(text):
            if match.start() >= len(text):
                continue  # the empty "line" after the last newline
            first = bisect.bisect_right(starts, match.start()) - 1
            last = bisect.bisect_right(starts, max(match.start(), match.end() - 1)) - 1
            covered.update(range(first, last + 1))
    return covered


def error_lines(text: str, patterns: LogPatterns = GENERIC, last: int = TAIL_LINES) -> list[str]:
    """The lines of ``text`` (a log's tail) that say why the job ended.

    Its last ``last`` lines that are not boilerplate, preceded by its first error line (with the
    error lines right after it, up to FIRST_ERROR_LINES) and ``GAP`` where lines are left out, when
    that line is further up: the first NaN or exception usually started the end; what follows it
    (other ranks' copies) is left out. A traceback frame's source line is never an error line.
    """
    lines = text.splitlines()
    noise = boilerplate_lines(text, patterns) | {i for i, line in enumerate(lines) if line == GAP}
    kept = [i for i in range(len(lines)) if i not in noise]
    tail = kept[-last:] if last > 0 else []
    error = _compiled(patterns)[1]
    frame_source = False
    first: int | None = None
    for i in kept:
        if frame_source:
            frame_source = False
            continue
        if _FRAME.match(lines[i]):
            frame_source = True
            continue
        if error.search(lines[i]):
            first = i
            break
    shown = [lines[i] for i in tail]
    if first is None or (tail and first >= tail[0]):
        return shown
    # the first error line and the error lines right after it ("loss nan", then "loss is nan: stop")
    head = [first]
    for i in kept[kept.index(first) + 1 :]:
        if len(head) == FIRST_ERROR_LINES or (tail and i >= tail[0]) or not error.search(lines[i]):
            break
        head.append(i)
    between = bool(tail) and kept.index(tail[0]) > kept.index(head[-1]) + 1
    return [lines[i] for i in head] + ([GAP] if between else []) + shown


def error_text(text: str, patterns: LogPatterns = GENERIC, last: int = TAIL_LINES) -> str:
    """``error_lines`` joined by newlines."""
    return "\n".join(error_lines(text, patterns, last))
