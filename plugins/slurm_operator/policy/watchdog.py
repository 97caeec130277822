"""Pure watchdog judgments: a job in a state nobody can classify for too long; a running job that hangs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_operator.model.records import JobRecord, RemoteStat
from slurm_operator.model.states import ACTIVE_STATES, TERMINAL_STATES, SlurmState
from slurm_operator.policy.fatal import FatalRules, FatalScan

# Seconds a job may sit in a state the plugin cannot classify before the wait gives up.
DEFAULT_UNKNOWN_TIMEOUT = 1800.0
# Seconds of the first stretch of a run in which no job is judged hung. A training's start-up (NCCL
# init across nodes, building or loading the dataset index of a large blend, loading a checkpoint
# from a parallel file system) can be silent for tens of minutes; a false "hung" there would kill a
# healthy start and repeat it attempt after attempt, while a real hang in start-up costs at most
# this much more GPU time before it is caught. Two hours errs on the side of the healthy job.
DEFAULT_STARTUP_TIMEOUT = 7200.0

# sacct Elapsed, squeue %M and scontrol RunTime: [D-][HH:]MM:SS.
_ELAPSED = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$")


@dataclass(frozen=True)
class Alarm:
    """The watchdog's verdict: ``kind`` is ``unknown`` (fail the wait), ``hung`` (cancel, resubmit)
    or ``fatal`` (cancel, never resubmit: ``rule`` names the fatal rule, ``line`` the log line)."""

    kind: str
    message: str
    rule: str | None = None
    line: str | None = None


def elapsed_seconds(text: str) -> float | None:
    """``[D-][HH:]MM:SS`` in seconds; None when the text is empty or unreadable."""
    m = _ELAPSED.match(text.strip())
    if m is None:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return float(((days * 24 + hours) * 60 + minutes) * 60 + seconds)


def duration(seconds: float) -> str:
    """``45 s``, ``12 min 5 s``, ``2 h 3 min``: for messages."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min" if s % 3600 // 60 else f"{s // 3600} h"


def is_unclassified(state: SlurmState) -> bool:
    """Neither active nor ended: UNKNOWN, which is also what a state a newer Slurm adds parses to."""
    return state not in ACTIVE_STATES and state not in TERMINAL_STATES


def unknown_alarm(record: JobRecord, seconds: float, timeout: float) -> Alarm | None:
    """The one-line failure once ``record`` has been unclassifiable for ``timeout`` seconds, else None."""
    if not is_unclassified(record.state) or seconds < timeout:
        return None
    raw = record.raw_state or record.state.value
    job = record.job_id
    return Alarm(
        "unknown",
        f"job {job} has been in state {raw!r}, which is neither active nor ended, for {duration(seconds)} "
        f"(unknown_timeout {duration(timeout)}); the job was NOT cancelled (it may be fine, and a retry "
        f"re-attaches to it): check `sacct -j {job} -o JobID,State,Reason,NodeList` and the slurmctld log",
    )


def quiet_seconds(
    remote_now: float, elapsed: float, files: Sequence[RemoteStat], advanced_at: float | None = None
) -> float:
    """Seconds since the newest change of any watched file (or ``advanced_at``, the cluster time the
    job's reported progress last rose), counted from the job's start at most.

    A file last changed before the job started (the progress file of an earlier attempt) or not
    there yet counts as changed at the start: the clock starts when the job starts RUNNING.
    """
    start = remote_now - elapsed
    marks = [start, *(f.mtime for f in files if f.exists)]
    return remote_now - max([*marks, advanced_at] if advanced_at is not None else marks)


def hung_alarm(
    record: JobRecord,
    remote_now: float | None,
    files: Sequence[RemoteStat],
    *,
    progress_timeout: float,
    startup_timeout: float,
    mark: ProgressMark | None = None,
) -> Alarm | None:
    """Hung ⇔ RUNNING, run for ``startup_timeout`` at least, no watched file changed for ``progress_timeout``
    (and at least one of them visible).

    With a ``mark`` that has seen the job report its progress, the log (``files[0]``) no longer
    counts as a change: only a new high of the reported progress or a change of another file does
    (a restart loop or a rank printing warnings keeps the log growing without progress).

    ``remote_now`` and the job's run time (its Elapsed, computed by Slurm) both come from the
    cluster, as do the files' mtimes: no clock of the Airflow side is involved, so there is no skew
    and the judgment needs no memory (it survives triggerer restarts). None when it cannot judge.
    """
    if record.state is not SlurmState.RUNNING or remote_now is None:
        return None
    if not any(f.exists for f in files):
        # Slurm creates the log when the job starts: a running job with none of its files visible
        # means this view is broken (no GNU stat, a file system the login node does not mount, a
        # wrong path), not that the job hangs. Killing a healthy job is the worse mistake.
        return None
    elapsed = elapsed_seconds(record.elapsed)
    if elapsed is None or elapsed < startup_timeout:
        return None
    by_mark = mark is not None and mark.high is not None
    counted = files[1:] if by_mark else files
    quiet = quiet_seconds(remote_now, elapsed, counted, mark.advanced_at if by_mark and mark else None)
    if quiet < progress_timeout:
        return None
    if by_mark and mark is not None:
        what = (
            f"its reported progress stayed at {mark.high} while its log went on, and none of its "
            f"{len(counted)} progress file(s) changed"
        )
    else:
        what = f"none of its {len(files)} watched file(s) changed"
    return Alarm(
        "hung",
        f"job {record.job_id} made no progress for {duration(quiet)}: {what} (progress_timeout "
        f"{duration(progress_timeout)}; running for {duration(elapsed)})",
    )


@dataclass
class ProgressMark:
    """The highest progress a job's log reported (``pattern``'s group 1, an integer such as a
    training iteration) and the cluster time it was first seen there.

    Only a new high counts: a job restarting from a checkpoint in a loop reports the same
    iterations again and again. A re-created trigger takes the mark back from ``Clocks`` (else, kept
    in memory, a restart loop re-reporting its high would look like new progress after every
    triggerer restart).
    """

    pattern: str
    high: int | None = None
    advanced_at: float | None = None
    # For the attempt's record: the first value reported (where the job started from), the
    # highest, and the job's run time when the first was read (late by at most a poll interval).
    first: int | None = None
    top: int | None = None
    first_elapsed: float | None = None

    def saw(self, text: str, remote_now: float | None, elapsed: float | None = None) -> None:
        """Take the values ``text`` (new complete lines of the log) reports, read at ``remote_now``
        when the job had run ``elapsed`` seconds."""
        values = [int(m.group(1)) for m in re.finditer(self.pattern, text, re.MULTILINE)]
        if not values:
            return
        if self.first is None:
            self.first, self.first_elapsed = values[0], elapsed
        self.top = max(values) if self.top is None else max(self.top, *values)
        if remote_now is not None and (self.high is None or max(values) > self.high):
            self.high, self.advanced_at = max(values), remote_now

    def summary(self) -> dict[str, Any]:
        """What the attempt's record keeps of it (``Attempt.progress_at_start`` ...); {} when the job
        reported nothing."""
        if self.first is None:
            return {}
        done = {"progress_at_start": self.first, "progress_at_end": self.top}
        return done if self.first_elapsed is None else {**done, "first_progress_s": self.first_elapsed}


@dataclass(frozen=True)
class Clocks:
    """What the watchdog remembers across polls, in a JSON form a re-created trigger reads back.

    ``unknown_since``: wall-clock time the job was first seen unclassifiable; ``progress_high`` and
    ``advanced_at``: the ``ProgressMark`` (cluster time). Without them a triggerer that restarts
    more often than a timeout would restart every clock and never judge.
    """

    unknown_since: float | None = None
    progress_high: int | None = None
    advanced_at: float | None = None
    # The mark's record of the attempt (``ProgressMark.summary``), kept with the clocks.
    progress_first: int | None = None
    first_progress_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_value(cls, value: Any) -> Clocks:
        """A stored value; what is not a number is left out (never an error: it only costs time)."""
        if not isinstance(value, Mapping):
            return cls()

        def number(key: str) -> float | None:
            v = value.get(key)
            return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

        high, first = number("progress_high"), number("progress_first")
        return cls(
            number("unknown_since"),
            None if high is None else int(high),
            number("advanced_at"),
            None if first is None else int(first),
            number("first_progress_s"),
        )


@dataclass
class Watchdog:
    """The two judgments over a series of poll answers for one job (the trigger and the worker loop).

    :param unknown_timeout: seconds in an unclassifiable state before the wait fails (job kept).
    :param progress_timeout: seconds without a change of any of ``paths`` before the job is
        judged hung; None turns hang detection off.
    :param startup_timeout: seconds a job runs before it can be judged hung at all.
    :param paths: the watched files (the job's log first).
    :param progress_pattern: a regex whose group 1 is the progress the job's log reports (e.g. a
        training iteration); once seen, a growing log alone is not progress (``ProgressMark``).
        Only where the waiter reads the log (it must call ``saw_log``).
    :param fatal: rules whose match in the log read so far ends the wait at once (``policy.fatal``;
        the pattern's ``repeats`` count the lines ``progress_pattern`` matches). Read by ``saw_log``.
    """

    job_id: str
    unknown_timeout: float
    progress_timeout: float | None = None
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    paths: tuple[str, ...] = ()
    progress_pattern: str | None = None
    fatal: tuple[FatalRules, ...] = ()
    fatal_hit: tuple[str, str] | None = field(default=None, init=False)  # (rule, line)
    unknown_since: float | None = field(default=None, init=False)
    mark: ProgressMark | None = field(default=None, init=False)
    resumed: bool = field(default=False, init=False)  # ``resume`` was called
    # An earlier incarnation's unknown clock, for the next unclassifiable answer (``resume``).
    _stored_unknown: float | None = field(default=None, init=False)

    _scan: FatalScan | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.progress_pattern:
            self.mark = ProgressMark(self.progress_pattern)
        if self.fatal:
            self._scan = FatalScan(self.fatal, self.progress_pattern)

    def clocks(self) -> Clocks:
        """The clocks to keep where a re-created trigger finds them."""
        mark = self.mark or ProgressMark("")
        unknown = self.unknown_since or self._stored_unknown
        return Clocks(unknown, mark.high, mark.advanced_at, mark.first, mark.first_elapsed)

    def resume(self, stored: Clocks) -> None:
        """Continue the clocks an earlier incarnation of this wait kept (same job): each keeps its
        earliest start, so no restart lengthens a bound."""
        self.resumed = True
        if stored.unknown_since is not None:
            if self.unknown_since is not None:
                self.unknown_since = min(self.unknown_since, stored.unknown_since)
            else:
                self._stored_unknown = stored.unknown_since
        mark, high, at = self.mark, stored.progress_high, stored.advanced_at
        if mark is not None and stored.progress_first is not None:  # an earlier incarnation's first
            mark.first, mark.first_elapsed = stored.progress_first, stored.first_progress_s
            mark.top = max(mark.top or 0, high or 0, stored.progress_first)
        if mark is None or high is None or at is None:
            return
        if mark.high is None or high > mark.high:
            mark.high, mark.advanced_at = high, at
        elif high == mark.high:
            mark.advanced_at = at if mark.advanced_at is None else min(at, mark.advanced_at)

    def progress(self) -> dict[str, Any]:
        """What the job reported, for its attempt's record (``{"progress": {...}}``; {} for nothing)."""
        summary = self.mark.summary() if self.mark is not None else {}
        return {"progress": summary} if summary else {}

    def saw_log(self, text: str, remote_now: float | None, elapsed: str = "") -> None:
        """New complete lines of the job's log, read at cluster time ``remote_now``, when Slurm
        said the job had run ``elapsed`` (its Elapsed)."""
        if self.mark is not None and text:
            self.mark.saw(text, remote_now, elapsed_seconds(elapsed))
        if self._scan is not None and text and self.fatal_hit is None:
            self.fatal_hit = self._scan.feed(text)

    @property
    def watching(self) -> bool:
        """True when hang detection is on (the poll must then stat ``paths``)."""
        return bool(self.progress_timeout) and bool(self.paths)

    def observe(
        self,
        record: JobRecord,
        *,
        now: float,
        remote_now: float | None = None,
        files: Mapping[str, RemoteStat] | None = None,
    ) -> Alarm | None:
        """Judge one poll answer taken at wall-clock ``now``; the first alarm ends the wait."""
        if self.fatal_hit is not None:
            rule, line = self.fatal_hit
            message = f"job {record.job_id}: {rule}: its log says {line!r} (a fatal pattern); cancelling it"
            return Alarm("fatal", message, rule, line)
        if is_unclassified(record.state):
            if self.unknown_since is None:
                self.unknown_since = min(now, self._stored_unknown or now)
            return unknown_alarm(record, now - self.unknown_since, self.unknown_timeout)
        self.unknown_since = self._stored_unknown = None
        if not self.watching or files is None:
            return None
        stats = [files[p] for p in self.paths if p in files]
        if len(stats) < len(self.paths):
            return None  # this round did not stat every watched path (the job was pending): no judgment
        assert self.progress_timeout is not None
        return hung_alarm(
            record,
            remote_now,
            stats,
            progress_timeout=self.progress_timeout,
            startup_timeout=self.startup_timeout,
            mark=self.mark,
        )
