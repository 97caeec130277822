"""Pure parsers of Slurm command output; unreadable output raises SlurmParseError quoting it."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from slurm_operator.model.exceptions import (
    SlurmCommandError,
    SlurmParseError,
    SlurmSubmitError,
    SlurmSubmitLimitError,
)
from slurm_operator.model.records import JobRecord, JobStates, RemoteStat
from slurm_operator.model.states import ACTIVE_STATES, SUCCEEDED_STATES, SlurmState
from slurm_operator.remote.commands import ADOPT_MARK, COPY_MARK, SECTION_MARK

log = logging.getLogger(__name__)

SACCT_FIELDS = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "Elapsed",
    "Start",
    "End",
    "NodeList",
    "AllocTRES",
    "Reason",
)
SQUEUE_FIELDS = ("JobID", "JobName", "State", "Elapsed", "Start", "End", "NodeList", "Reason")
PENDING_FIELDS = ("JobID", "Reason", "StartTime")
_PENDING_ID = re.compile(r"^\d+(_\d+)?$")
_START_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$")

_PARSABLE = re.compile(r"^(\d+)(;\S+)?$")
# Refusals that go away by themselves: a submit limit (QOS/association MaxSubmit...) or a busy
# controller. Everything else (bad account, partition, resources, missing script) is permanent.
_RETRYABLE_SUBMIT = re.compile(
    r"MaxSubmit|SubmitJobs?Per|GrpSubmit|job submit limit|QOSMaxSubmit|AssocMaxSubmit|"
    r"temporarily unable to accept|Socket timed out|Resource temporarily unavailable",
    re.IGNORECASE,
)
_EMPTY_VALUES = {"Unknown", "N/A", "None assigned", "(null)", "None", "NONE"}
_SCONTROL_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z/:_]*)=")


def parse_exit_code(raw: str) -> tuple[int | None, int | None]:
    """``"3:0"`` -> (3, 0): the script's exit status and the terminating signal."""
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", raw)
    if not m:
        return None, None
    return int(m.group(1)), int(m.group(2))


def parse_sbatch(stdout: str) -> str:
    """The job id printed by ``sbatch --parsable`` (``42`` or ``42;cluster``)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    m = _PARSABLE.match(lines[-1]) if lines else None
    if not m:
        raise SlurmParseError("sbatch --parsable printed no job id", stdout)
    return m.group(1)


@dataclass(frozen=True)
class Submitted:
    """What ``commands.submit_attempt`` did: ``job_id`` submitted from script copy ``number``, or
    an active job of the name ``adopted`` (``number`` None: no copy claimed)."""

    number: int | None
    job_id: str
    adopted: bool = False


def submitted_attempt(command: str, exit_status: int, stdout: str, stderr: str) -> Submitted:
    """Read ``commands.submit_attempt``'s output: the adopted job (the newest of those listed), or
    the claimed copy's number and sbatch's job id. A refused sbatch raises its submit error, which
    names the copy; a failure before it (lock, folder, copy) a command error with its reason."""
    lines = stdout.strip().split("\n")
    first = lines[0].split()
    if exit_status == 0 and first[:1] == [ADOPT_MARK]:
        ids = first[1:]
        if not ids or not all(_PARSABLE.match(i) for i in ids):
            raise SlurmParseError("expected job ids after the adopt mark", stdout)
        return Submitted(None, max(ids, key=lambda i: int(re.sub(r"\D.*", "", i) or 0)), adopted=True)
    if first[:1] != [COPY_MARK] or len(first) != 2 or not first[1].isdigit():
        if exit_status != 0:
            reason = stderr.strip() or stdout.strip() or f"exit status {exit_status}"
            raise SlurmCommandError(
                f"no script copy submitted: {reason}", command=command, exit_status=exit_status, stderr=stderr
            )
        raise SlurmParseError("expected the claimed script copy's number", stdout)
    number, rest = int(first[1]), "\n".join(lines[1:])
    if exit_status != 0:
        err = submit_error(command, exit_status, rest, stderr)
        raise type(err)(
            f"{err} (script copy {number})", command=command, exit_status=exit_status, stderr=stderr
        )
    return Submitted(number, parse_sbatch(rest))


_CANCELLED_BY = re.compile(r"^CANCELLED\s+by\s+(\d+)\s*$")


def cancelled_by_uid(raw_state: str) -> int | None:
    """The uid in sacct's ``CANCELLED by 1000``; None when sacct does not name one."""
    m = _CANCELLED_BY.match(raw_state.strip())
    return int(m.group(1)) if m else None


def parse_passwd_name(stdout: str) -> str | None:
    """The account name of ``getent passwd UID`` output (``alice:x:1000:...``), or None."""
    first = stdout.strip().split(":", 1)[0] if stdout.strip() else ""
    return first or None


def submit_error(command: str, exit_status: int, stdout: str, stderr: str) -> SlurmSubmitError:
    """The error for a refused sbatch, naming Slurm's own reason; limit refusals are retryable."""
    lines = [line.strip() for line in (stderr or stdout).splitlines() if line.strip()]
    # sbatch prints "sbatch: error: Batch job submission failed: <reason>" last; keep the errors only.
    errors = [line.removeprefix("sbatch: error: ") for line in lines if "error" in line.lower()] or lines
    reason = "; ".join(errors) or f"sbatch exited {exit_status} without a message"
    cls = SlurmSubmitLimitError if _RETRYABLE_SUBMIT.search(reason) else SlurmSubmitError
    kind = "refused for a submit limit (retry later)" if cls is SlurmSubmitLimitError else "refused"
    return cls(f"sbatch {kind}: {reason}", command=command, exit_status=exit_status, stderr=stderr)


def submitted_job(command: str, exit_status: int, stdout: str, stderr: str) -> str:
    """The job id of an sbatch that succeeded; the submit error of one that did not."""
    if exit_status != 0:
        raise submit_error(command, exit_status, stdout, stderr)
    return parse_sbatch(stdout)


def _clean(value: str) -> str:
    value = value.strip()
    return "" if value in _EMPTY_VALUES else value


def _split(line: str, fields: Sequence[str]) -> list[str]:
    """Split a ``|``-separated line; a job name containing ``|`` is glued back (it is field 1)."""
    parts = line.split("|")
    extra = len(parts) - len(fields)
    if extra < 0:
        raise SlurmParseError(f"expected {len(fields)} '|'-separated fields ({','.join(fields)})", line)
    if extra:
        parts = [parts[0], "|".join(parts[1 : 2 + extra]), *parts[2 + extra :]]
    return parts


def _record(job: str, name: str, raw_state: str, exit_raw: str, **fields: str) -> JobRecord:
    state = SlurmState.parse(raw_state)
    code, sig = parse_exit_code(exit_raw)
    if state in ACTIVE_STATES:
        code = sig = None  # sacct and scontrol print 0:0 for jobs that have not ended: not an exit status
    return JobRecord(
        job_id=job,
        name=name,
        state=state,
        exit_code=code,
        signal=sig,
        raw_state=raw_state.strip(),
        cancelled_by_uid=cancelled_by_uid(raw_state),
        **{k: _clean(v) for k, v in fields.items()},
    )


def parse_sacct(text: str) -> list[JobRecord]:
    """Rows of ``sacct -P -n -o SACCT_FORMAT``; step rows (``42.batch``, ``42.extern``) are skipped."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job, name, state, exit_raw, elapsed, start, end, nodes, tres, reason = _split(line, SACCT_FIELDS)
        if "." in job:
            continue
        records.append(
            _record(
                job, name, state, exit_raw, elapsed=elapsed, start=start, end=end, node_list=nodes,
                alloc_tres=tres, reason=reason,
            )
        )  # fmt: skip
    return records


def tres_counts(alloc_tres: str) -> dict[str, float]:
    """``cpu=2,mem=4G,gres/gpu=1`` -> {"cpu": 2, "gres/gpu": 1}: the countable resources of AllocTRES
    (memory and other values with a unit are left out)."""
    counts: dict[str, float] = {}
    for item in alloc_tres.split(","):
        key, _, value = item.partition("=")
        try:
            counts[key.strip()] = float(value)
        except ValueError:
            continue
    return counts


def parse_squeue(text: str) -> list[JobRecord]:
    """Rows of ``squeue -h -r -o SQUEUE_FORMAT`` (no exit codes: squeue does not know them)."""
    records = []
    for line in text.splitlines():
        if not line.strip():
            continue
        job, name, state, elapsed, start, end, nodes, reason = _split(line, SQUEUE_FIELDS)
        rec = _record(job, name, state, "", elapsed=elapsed, end=end, node_list=nodes, reason=reason)
        # %S of a pending job is the scheduler's estimate, not a start.
        if rec.state is SlurmState.PENDING:
            rec = replace(rec, expected_start=_clean(start) or None)
        else:
            rec = replace(rec, start=_clean(start))
        records.append(rec)
    return records


def parse_pending(text: str) -> dict[str, tuple[str, str | None]]:
    """Rows of ``squeue --start -o PENDING_FORMAT``: job id -> (reason, estimated start or None).

    ``N/A`` (no estimate yet: the backfill scheduler has not placed the job) becomes None; a row
    that is not ``ID|REASON|YYYY-MM-DDTHH:MM:SS`` (or ``N/A``) raises, quoting it.
    """
    pending: dict[str, tuple[str, str | None]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(PENDING_FIELDS):
            raise SlurmParseError(f"expected {len(PENDING_FIELDS)} '|'-separated fields "
                                  f"({','.join(PENDING_FIELDS)}) from squeue --start", line)  # fmt: skip
        job, reason, start = (p.strip() for p in parts)
        expected = _clean(start)
        if not _PENDING_ID.match(job) or not (expected == "" or _START_TIME.match(expected)):
            raise SlurmParseError(
                "expected 'ID|REASON|YYYY-MM-DDTHH:MM:SS' (or N/A) from squeue --start", line
            )
        pending[job] = (_clean(reason), expected or None)
    return pending


def parse_scontrol(text: str) -> list[JobRecord]:
    """Lines of ``scontrol -o show job``; array tasks get their ``42_3`` id."""
    records = []
    for line in text.splitlines():
        if not line.startswith("JobId="):
            continue  # "slurm_load_jobs error: Invalid job id specified" and the like
        keys = list(_SCONTROL_KEY.finditer(line))
        values = {
            m.group(1): line[m.end() : keys[i + 1].start() if i + 1 < len(keys) else len(line)].strip()
            for i, m in enumerate(keys)
        }
        job = values.get("JobId", "")
        task = values.get("ArrayTaskId", "")
        if values.get("ArrayJobId") and task.isdigit():
            job = f"{values['ArrayJobId']}_{task}"
        if "JobState" not in values or not job:
            raise SlurmParseError("scontrol show job line without JobId/JobState", line)
        records.append(
            _record(
                job, values.get("JobName", ""), values["JobState"], values.get("ExitCode", ""),
                elapsed=values.get("RunTime", ""), start=values.get("StartTime", ""),
                end=values.get("EndTime", ""), node_list=values.get("NodeList", ""),
                alloc_tres=values.get("TRES", ""), reason=values.get("Reason", ""),
            )
        )  # fmt: skip
    return records


def _sections(stdout: str) -> list[tuple[str, int, str]]:
    """(source, exit status, text) for each section of the batched query's output."""
    sections: list[tuple[str, int, list[str]]] = []
    for line in stdout.splitlines():
        if line.startswith(SECTION_MARK):
            parts = line.split()
            if len(parts) != 3 or not parts[2].isdigit():
                raise SlurmParseError("bad section line in job-state output", line)
            sections.append((parts[1], int(parts[2]), []))
        elif sections:
            sections[-1][2].append(line)
        elif line.strip():
            raise SlurmParseError("job-state output does not start with a section line", stdout)
    return [(src, rc, "\n".join(lines)) for src, rc, lines in sections]


_PARSERS = {"sacct": parse_sacct, "squeue": parse_squeue, "scontrol": parse_scontrol}
WATCH_SOURCE = "files"
PENDING_SOURCE = "pending"


def parse_watch(text: str, paths: Iterable[str]) -> tuple[float, dict[str, RemoteStat]]:
    """The ``files`` section: the cluster's clock, then ``MTIME SIZE PATH`` per existing path.

    Every requested path gets a RemoteStat; one stat did not print is missing (``exists`` False).
    """
    lines = text.splitlines()
    if not lines or not lines[0].strip().isdigit():
        raise SlurmParseError("files section does not start with the remote clock (date +%s)", text)
    found: dict[str, RemoteStat] = {}
    for line in lines[1:]:
        mtime, size, path = [*line.split(" ", 2), "", ""][:3]
        if not (mtime.isdigit() and size.isdigit() and path):
            raise SlurmParseError("expected 'MTIME SIZE PATH' in the files section", line)
        found[path] = RemoteStat(path=path, exists=True, size=int(size), mtime=float(mtime))
    files = {p: found.get(p, RemoteStat(path=p, exists=False)) for p in paths}
    return float(lines[0].strip()), files


def parse_job_states(stdout: str, stderr: str, ids: Iterable[str], watch: Iterable[str] = ()) -> JobStates:
    """Merge the sections of ``commands.job_states`` into one record per requested id.

    Accounting (sacct) wins; squeue/scontrol only fill in ids sacct did not list. The answer is
    authoritative when sacct answered. The ``pending`` section (``squeue --start``) gives the
    PENDING jobs sacct listed their live reason and estimated start. A requested array base id
    (``42``) gets an aggregate record (see ``aggregate_array``). Raises SlurmCommandError when no
    source answered at all (e.g. slurmctld and slurmdbd both down), quoting stderr. The ``watch``
    paths' stats and the remote clock come from the ``files`` section, when the command was built
    with one.
    """
    wanted = list(ids)
    sections = _sections(stdout)
    if not sections:
        raise SlurmParseError("job-state query printed nothing", stdout + stderr)
    records: dict[str, JobRecord] = {}
    answered: list[str] = []
    remote_now: float | None = None
    files: dict[str, RemoteStat] = {}
    pending: dict[str, tuple[str, str | None]] = {}
    for source, rc, text in sections:
        if source == WATCH_SOURCE:
            remote_now, files = parse_watch(text, watch)
            continue
        if source == PENDING_SOURCE:
            # A failed squeue (the jobs started or ended since sacct) leaves accounting's reason.
            if rc == 0:
                pending = parse_pending(text)
            continue
        if rc != 0:
            continue
        answered.append(source)
        for rec in _PARSERS[source](text):
            known = records.get(rec.job_id)
            # First source wins, except that scontrol's exit code completes a job squeue saw finish.
            if known is None or (known.exit_code is None and known.state not in ACTIVE_STATES):
                records[rec.job_id] = rec
    sacct_ok = "sacct" in answered
    if not answered or (not sacct_ok and answered == ["scontrol"] and not records):
        message = " ".join(stderr.split()) or "no output"
        raise SlurmCommandError(
            f"no Slurm command could report jobs {','.join(wanted)}: {message}", stderr=stderr
        )
    for job, (reason, expected) in pending.items():
        known = records.get(job)
        if known is not None and known.state is SlurmState.PENDING:
            records[job] = replace(known, reason=reason or known.reason, expected_start=expected)
    for job in wanted:
        tasks = [r for k, r in records.items() if k.startswith(f"{job}_")] if "_" not in job else []
        if not tasks:
            continue
        # A row a source listed under the base id itself is one task's (accounting can list the task
        # that kept the array's id without its index), never the whole array's: it joins the tasks.
        if job in records:
            tasks.append(records[job])
        records[job] = aggregate_array(job, tasks)
    return JobStates(
        records=records, source=answered[0], authoritative=sacct_ok, remote_now=remote_now, files=files
    )


def aggregate_array(job: str, tasks: Sequence[JobRecord]) -> JobRecord:
    """One record standing for a whole array: active while any task is, COMPLETED only if all
    tasks completed, else the first failed task's state and exit code."""
    active = [t for t in tasks if t.state in ACTIVE_STATES]
    failed = [t for t in tasks if t.state not in ACTIVE_STATES and t.state not in SUCCEEDED_STATES]
    pick = active[0] if active else failed[0] if failed else tasks[0]
    summary = f"array of {len(tasks)} records: " + ", ".join(f"{t.job_id}={t.state.value}" for t in tasks)
    # The picked task's fields, under the array's id, with the array's span and every record's state.
    start = min((t.start for t in tasks if t.start), default="")
    end = "" if active else max((t.end for t in tasks if t.end), default="")
    return replace(pick, job_id=job, start=start, end=end, reason=summary)


def check_command(command: str, exit_status: int, stdout: str, stderr: str, what: str) -> None:
    """Raise SlurmCommandError naming ``what`` and Slurm's message when a command failed."""
    if exit_status != 0:
        message = " ".join((stderr or stdout).split()) or "no output"
        raise SlurmCommandError(f"{what} failed (exit {exit_status}): {message}", command=command,
                                exit_status=exit_status, stderr=stderr)  # fmt: skip
