"""Pure builders of the remote shell strings; every value is validated or shlex-quoted here, and only here."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from slurm_operator.model.states import ACTIVE_STATES, ADOPTABLE_STATES
from slurm_operator.remote.hostlist import NODE_NAME

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is Python 3.11+

# Fields of `sacct -P -o ...`, in order; parsers.SACCT_FIELDS must match.
SACCT_FORMAT = "JobID,JobName,State,ExitCode,Elapsed,Start,End,NodeList,AllocTRES,Reason"
# squeue has no exit code and no allocated TRES; %T is the long state name, -r expands array tasks.
SQUEUE_FORMAT = "%i|%j|%T|%M|%S|%e|%N|%r"
# `squeue --start` of the pending jobs: the live reason and the backfill scheduler's estimated start
# (%S, N/A while it has none); parsers.PENDING_FIELDS must match.
PENDING_FORMAT = "%i|%r|%S"
# Lines starting with this mark separate the sections of the batched state query's output.
SECTION_MARK = "#slurm-operator-section"
# squeue's long names of the states in which a job has not ended (an awk alternation).
_ACTIVE_ALTERNATION = "|".join(sorted(s.value for s in ACTIVE_STATES))

_JOB_ID = re.compile(r"^\d+(_\d+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIGNAL = re.compile(r"^(SIG)?[A-Z][A-Z0-9+-]*$|^\d{1,2}$")
_JOB_NAME = re.compile(r"^[^\s\x00-\x1f,]{1,200}$")


def job_id(value: str) -> str:
    """A job id as Slurm prints it (``42`` or ``42_3``); anything else is refused, not quoted."""
    if not _JOB_ID.match(value):
        raise ValueError(
            f"not a Slurm job id: {value!r} (expected digits, or digits_digits for an array task)"
        )
    return value


def job_ids(values: Iterable[str]) -> list[str]:
    ids = [job_id(str(v)) for v in values]
    if not ids:
        raise ValueError("no job ids given")
    return list(dict.fromkeys(ids))  # de-duplicated, order kept


def sh(script: str, *args: str) -> str:
    """Run a POSIX sh script with positional args: independent of the login shell (csh users exist)."""
    return shlex.join(["sh", "-c", script, "sh", *args])


def env_prefix(environment: Mapping[str, str] | None) -> list[str]:
    """``env -- K=V ...`` words (empty without variables); names are validated, values quoted later."""
    if not environment:
        return []
    words = ["env", "--"]
    for name, value in environment.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"not a valid environment variable name: {name!r}")
        words.append(f"{name}={value}")
    return words


def sbatch(
    *,
    script_path: str | None = None,
    sbatch_args: Sequence[str] = (),
    environment: Mapping[str, str] | None = None,
) -> str:
    """``sbatch --parsable ARGS [PATH]``; without a path sbatch reads the script from stdin.

    The environment goes through ``env`` rather than ``--export=...,K=V`` because sbatch splits
    ``--export`` on commas, which breaks values such as lists of data paths.
    """
    words = [*env_prefix(environment), "sbatch", "--parsable", *(str(a) for a in sbatch_args)]
    if script_path is not None:
        if not script_path:
            raise ValueError("empty script path")
        words.append(script_path)
    return shlex.join(words)


def exclude_args(sbatch_args: Sequence[str], nodes: Sequence[str]) -> list[str]:
    """``sbatch_args`` with ``nodes`` added to its ``--exclude=`` (or one of its own first: sbatch
    takes the last of a repeated option, so a caller's ``-x``/``--exclude NODES`` still wins).
    Each node name is checked (``hostlist.NODE_NAME``); the words are quoted by ``sbatch``."""
    bad = [n for n in nodes if not NODE_NAME.match(n)]
    if bad:
        raise ValueError(f"not a node name: {bad[0]!r}")
    if not nodes:
        return list(sbatch_args)
    args, merged = [], False
    for arg in sbatch_args:
        if arg.startswith("--exclude=") and not merged:
            theirs = [n for n in arg.removeprefix("--exclude=").split(",") if n]
            arg, merged = f"--exclude={','.join(dict.fromkeys([*theirs, *nodes]))}", True
        args.append(arg)
    return args if merged else [f"--exclude={','.join(nodes)}", *args]


def job_states(ids: Iterable[str], *, watch: bool = False) -> str:
    """ONE remote command that reports every job in ``ids``.

    sacct first: it reads accounting, the only record that keeps finished jobs. Jobs sacct does not
    list (just submitted, not yet recorded; or accounting disabled) are asked of squeue, and when
    squeue fails (a job purged after MinJobAge, or no such job) each of them of ``scontrol show job``.
    Each section starts with ``SECTION_MARK <source> <exit status>``. The jobs sacct lists as
    PENDING are also asked of ``squeue --start`` (a ``pending`` section: the live reason and the
    estimated start), in the same command; squeue's own section has both already (%r, %S).

    With ``watch`` the command first prints a ``files`` section: the cluster's clock (``date +%s``)
    and ``MTIME SIZE PATH`` for each path of ``watch_input(paths)`` (sent on stdin) that exists, so
    hang detection costs no command of its own.
    """
    wanted = job_ids(ids)
    script = _WATCH_SCRIPT if watch else ""
    script += f"""
out=$(sacct -X -P -n -o {SACCT_FORMAT} -j "$1"); rc=$?
echo "{SECTION_MARK} sacct $rc"; printf '%s\\n' "$out"
if [ $rc -eq 0 ]; then
  # Accounting's reason of a pending job lags and it has no estimated start: ask squeue, only
  # about the jobs sacct lists as pending (State is field NF-7: a '|' in a job name shifts $3).
  pending=$(printf '%s\\n' "$out" |
    awk -F'|' 'NF >= 10 && $(NF-7) == "PENDING" && $1 ~ /^[0-9]+(_[0-9]+)?$/ {{printf ",%s", $1}}')
  if [ -n "$pending" ]; then
    est=$(squeue --start -h -r -o '{PENDING_FORMAT}' -j "${{pending#,}}"); erc=$?
    echo "{SECTION_MARK} pending $erc"; printf '%s\\n' "$est"
  fi
fi
missing=""
for id in $(echo "$1" | tr , ' '); do
  [ $rc -eq 0 ] && printf '%s\\n' "$out" | grep -q "^$id[|_.]" && continue
  missing="$missing,$id"
done
[ -n "$missing" ] || exit 0
out=$(squeue -h -r -t all -o '{SQUEUE_FORMAT}' -j "${{missing#,}}"); rc=$?
echo "{SECTION_MARK} squeue $rc"; printf '%s\\n' "$out"
if [ $rc -eq 0 ]; then
  # squeue knows no exit codes: ask scontrol about the jobs it shows as already finished.
  missing=$(printf '%s\\n' "$out" |
    awk -F'|' '$3 != "" && $3 !~ /^({_ACTIVE_ALTERNATION})$/ {{printf ",%s", $1}}')
  [ -n "$missing" ] || exit 0
fi
echo "{SECTION_MARK} scontrol 0"
for id in $(echo "${{missing#,}}" | tr , ' '); do scontrol -o show job "$id"; done
exit 0
"""
    return sh(script.strip(), ",".join(wanted))


# Paths come on stdin, one per line, handed to stat as whole arguments by xargs: never parsed by a
# shell, and never on the command line (one exec request is one argv string, capped at 128 KiB by
# Linux's MAX_ARG_STRLEN: a thousand jobs' paths would not fit). One stat process for all paths; a
# missing path prints nothing (its error goes to /dev/null) and the parser marks it missing.
_WATCH_SCRIPT = f"""
echo "{SECTION_MARK} files 0"; date +%s
xargs -r -d '\\n' stat -c '%Y %s %n' -- 2>/dev/null"""


def watch_input(paths: Iterable[str]) -> str:
    """stdin of ``job_states(..., watch=True)``: one path per line (a newline in a path is refused)."""
    lines = []
    for path in paths:
        if "\n" in path or "\r" in path:
            raise ValueError(f"not a watchable remote path (line break): {path!r}")
        lines.append(_path(path))
    return "".join(f"{line}\n" for line in lines)


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2})?)?$")


def accounting_input(names: Iterable[str]) -> str:
    """The job names of ``accounting`` as its stdin, one per line (validated: no commas, no spaces)."""
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if not _JOB_NAME.match(name):
            raise ValueError(f"not a usable Slurm job name: {name!r}")
    return "".join(f"{name}\n" for name in wanted)


def accounting(since: str) -> str:
    """ONE sacct of every job (and every requeued run of it, ``-D``) named on stdin since ``since``.

    The names come on stdin (see ``accounting_input``): a campaign's thousand names would make one
    long exec request. ``-S`` is needed: without ``-j`` sacct lists only jobs since midnight.
    """
    if not _DATE.match(since):
        raise ValueError(f"not a sacct start time (YYYY-MM-DD[THH:MM[:SS]]): {since!r}")
    script = (
        'names=$(paste -sd, -)\n[ -n "$names" ] || exit 0\n'
        f'exec sacct -X -D -P -n -o {SACCT_FORMAT} -S "$1" --name="$names"'
    )
    return sh(script, since)


def find_active(name: str) -> str:
    """squeue of the caller's own unfinished jobs named ``name`` (for re-attaching after a restart)."""
    if not _JOB_NAME.match(name):
        raise ValueError(f"not a usable Slurm job name: {name!r}")
    return shlex.join(["squeue", "--me", "-h", "-r", "-o", SQUEUE_FORMAT, f"--name={name}"])


# One remote command per attempt: under the lock (with ``lock_path``), adopt an active job of the
# name; else create the log's folder, claim the next free script copy name with an exclusive create
# (noclobber: O_CREAT|O_EXCL, so no copy is ever overwritten, even when the attempt history that
# numbers them is lost), fill it from the source file or stdin, say its number, exec sbatch on it.
# The lock is held across "is one running?" and sbatch: squeue lists a job as soon as sbatch
# returns, so a second submitter waiting on the lock sees the first one's job and adopts it.
_SUBMIT_ATTEMPT_SCRIPT = """lock=$1 wait=$2 active=$3 name=$4 base=$5 first=$6 last=$7 logdir=$8 src=$9
shift 9
if [ -n "$lock" ]; then
  mkdir -p -- "$(dirname -- "$lock")" || exit 1
  exec 9>>"$lock" || exit 1
  flock -w "$wait" 9 || { echo "lock $lock not acquired within $wait s" >&2; exit 1; }
  out=$(squeue --me -h -r -o '%i %T' --name="$name") || exit 1
  found=$(printf '%s\\n' "$out" | awk -v active=",$active," 'index(active, "," $2 ",") { print $1 }')
  if [ -n "$found" ]; then echo "$ADOPT_MARK" $found; exit 0; fi
fi
[ -z "$logdir" ] || mkdir -p -- "$logdir" || exit 1
mkdir -p -- "$(dirname -- "$base")" || exit 1
n=$first
while [ "$n" -lt "$last" ]; do
  f=$(printf '%s.attempt%03d.sbatch' "$base" "$n")
  if (set -C; : > "$f") 2>/dev/null; then
    if [ -n "$src" ]; then cat -- "$src" > "$f"; else cat > "$f"; fi || { rm -f -- "$f"; exit 1; }
    echo "$COPY_MARK $n"
    exec "$@" "$f"
  fi
  [ -e "$f" ] || { echo "cannot create $f" >&2; exit 1; }
  n=$((n + 1))
done
echo "no free script copy name from $first to $last for $base" >&2; exit 1
"""
ADOPT_MARK = "#slurm-operator-adopt"
COPY_MARK = "#slurm-operator-copy"
# A COMPLETING job is ending (most often cancelled by the task instance that ran it): not adopted.
_ADOPTABLE_LIST = ",".join(sorted(s.value for s in ADOPTABLE_STATES))


@dataclass(frozen=True)
class AttemptSubmit:
    """What one ``submit_attempt`` command does (see there)."""

    base: str
    first: int
    sbatch_args: Sequence[str] = ()
    environment: Mapping[str, str] | None = None
    source: str | None = None
    log_dir: str | None = None
    lock_path: str | None = None
    name: str | None = None
    wait_secs: int = 120
    tries: int = 1000


def submit_attempt(spec: AttemptSubmit) -> str:
    """ONE remote command that submits an attempt from a script copy of its own.

    The copy is the first free ``<base>.attemptNNN.sbatch`` with NNN >= ``first`` (``base`` from
    ``naming.attempt_script_base``; the format must match ``naming.attempt_script_path``), filled
    from the cluster file ``source`` or, without one, from stdin; its number is printed after
    ``COPY_MARK``, then sbatch's own output. ``log_dir`` is created first: Slurm does not create the
    ``--output`` folder, and a job without one ends FAILED at once with no log at all. With
    ``lock_path`` everything runs under ``flock`` on that file, and an active job of ours called
    ``name`` is adopted instead (``ADOPT_MARK`` and its ids; no copy claimed): two submitters
    sharing a name never both submit. ``parsers.submitted_attempt`` reads the output.
    """
    if spec.first < 1:
        raise ValueError(f"attempt numbers start at 1, got {spec.first}")
    if spec.lock_path is not None and not _JOB_NAME.match(spec.name or ""):
        raise ValueError(f"not a usable Slurm job name: {spec.name!r}")
    words = shlex.split(sbatch(sbatch_args=spec.sbatch_args, environment=spec.environment))
    script = _SUBMIT_ATTEMPT_SCRIPT.replace("$ADOPT_MARK", ADOPT_MARK).replace("$COPY_MARK", COPY_MARK)
    return sh(
        script,
        "" if spec.lock_path is None else _path(spec.lock_path),
        str(spec.wait_secs),
        _ADOPTABLE_LIST,
        spec.name or "",
        _path(spec.base),
        str(spec.first),
        str(spec.first + spec.tries),
        "" if not spec.log_dir else _path(spec.log_dir),
        "" if spec.source is None else _path(spec.source),
        *words,
    )


def scancel(job: str, signal: str | None = None) -> str:
    """``scancel [--signal=SIG] ID``; a signal is sent to the job's steps, as scancel does."""
    words = ["scancel"]
    if signal is not None:
        if not _SIGNAL.match(signal):
            raise ValueError(f"not a signal name or number: {signal!r}")
        words.append(f"--signal={signal}")
    words.append(job_id(job))
    return shlex.join(words)


def scancel_marked(job: str, marker: str, reason: str) -> str:
    """Write ``reason`` to ``marker`` (temporary file + rename), then ``scancel ID``, in ONE command.

    The marker says "this plugin cancelled the job" (see ``naming.cancel_marker_path``); it is
    written first, so no cancel of ours is ever seen without it. A marker that cannot be written
    does not stop the cancel (stopping the job matters more); a failed scancel removes it again.
    """
    script = """{ printf '%s\\n' "$3" > "$2.tmp.$$" && mv -f "$2.tmp.$$" "$2"; } 2>/dev/null ||
  echo "could not write the cancel marker $2" >&2
scancel "$1" || { rc=$?; rm -f "$2"; exit $rc; }"""
    return sh(script, job_id(job), _path(marker), reason)


def cancel(job: str, signal: str | None = None, *, marker: str | None = None, reason: str = "") -> str:
    """The hooks' one cancel: ``scancel_marked`` with a ``marker`` (a cancel of ours), else ``scancel``."""
    if marker is None:
        return scancel(job, signal)
    if signal is not None:
        raise ValueError("a marked cancel ends the job: it sends no signal")
    return scancel_marked(job, marker, reason)


def user_name(uid: int) -> str:
    """``getent passwd UID``: the account name of the uid sacct names in ``CANCELLED by <uid>``."""
    return shlex.join(["getent", "passwd", str(int(uid))])


def mkdir_p(path: str) -> str:
    return shlex.join(["mkdir", "-p", "--", _path(path)])


def _path(path: str) -> str:
    if not path or "\x00" in path:
        raise ValueError(f"not a usable remote path: {path!r}")
    return path


class SubmitArgs(TypedDict, total=False):
    """The keyword arguments of both hooks' ``submit`` (see ``SlurmHook.submit``)."""

    script: str | None
    script_path: str | None
    upload_to: str | None
    sbatch_args: Sequence[str]
    environment: Mapping[str, str] | None


@dataclass(frozen=True)
class SubmitPlan:
    """How a submission travels: ``upload`` (write the script text there first), then ``sbatch``."""

    upload: str | None
    script_path: str | None
    stdin: str | None


def plan_submit(script: str | None, script_path: str | None, upload_to: str | None) -> SubmitPlan:
    """Check the submit arguments (exactly one of script/script_path; upload_to only with script)."""
    if (script is None) == (script_path is None):
        raise ValueError("give exactly one of script= and script_path=")
    if upload_to is not None and script is None:
        raise ValueError("upload_to= needs script= (script_path= is already on the cluster)")
    if script is not None and upload_to is not None:
        return SubmitPlan(upload=upload_to, script_path=upload_to, stdin=None)
    return SubmitPlan(upload=None, script_path=script_path, stdin=script)


def prepare_submit(**args: Unpack[SubmitArgs]) -> tuple[SubmitPlan, str]:
    """The plan of a hook's ``submit`` and its sbatch command."""
    plan = plan_submit(args.get("script"), args.get("script_path"), args.get("upload_to"))
    command = sbatch(
        script_path=plan.script_path,
        sbatch_args=args.get("sbatch_args", ()),
        environment=args.get("environment"),
    )
    return plan, command
