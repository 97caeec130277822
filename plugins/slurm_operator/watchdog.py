"""Pure watchdog judgments: a job in a state nobody can classify for too long; a running job that hangs."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_operator.records import JobRecord, RemoteStat
from slurm_operator.states import ACTIVE_STATES, TERMINAL_STATES, SlurmState

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
    """The watchdog's verdict: ``kind`` is ``unknown`` (fail the wait) or ``hung`` (cancel, resubmit)."""

    kind: str
    message: str


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


def quiet_seconds(remote_now: float, elapsed: float, files: Sequence[RemoteStat]) -> float:
    """Seconds since the newest change of any watched file, counted from the job's start at most.

    A file last changed before the job started (the progress file of an earlier attempt) or not
    there yet counts as changed at the start: the clock starts when the job starts RUNNING.
    """
    start = remote_now - elapsed
    return remote_now - max([start, *(f.mtime for f in files if f.exists)])


def hung_alarm(
    record: JobRecord,
    remote_now: float | None,
    files: Sequence[RemoteStat],
    *,
    progress_timeout: float,
    startup_timeout: float,
) -> Alarm | None:
    """Hung ⇔ RUNNING, run for ``startup_timeout`` at least, no watched file changed for ``progress_timeout``
    (and at least one of them visible).

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
    quiet = quiet_seconds(remote_now, elapsed, files)
    if quiet < progress_timeout:
        return None
    return Alarm(
        "hung",
        f"job {record.job_id} made no progress for {duration(quiet)}: none of its {len(files)} watched "
        f"file(s) changed (progress_timeout {duration(progress_timeout)}; running for {duration(elapsed)})",
    )


@dataclass
class Watchdog:
    """The two judgments over a series of poll answers for one job (the trigger and the worker loop).

    :param unknown_timeout: seconds in an unclassifiable state before the wait fails (job kept).
    :param progress_timeout: seconds without a change of any of ``paths`` before the job is
        judged hung; None turns hang detection off.
    :param startup_timeout: seconds a job runs before it can be judged hung at all.
    :param paths: the watched files (the job's log first).
    """

    job_id: str
    unknown_timeout: float
    progress_timeout: float | None = None
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    paths: tuple[str, ...] = ()
    unknown_since: float | None = field(default=None, init=False)

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
        if is_unclassified(record.state):
            # Only this clock lives in memory: after a triggerer restart the allowance starts again.
            if self.unknown_since is None:
                self.unknown_since = now
            return unknown_alarm(record, now - self.unknown_since, self.unknown_timeout)
        self.unknown_since = None
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
        )
