"""Deterministic Slurm job names and per-attempt remote paths for Airflow task instances."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

# Slurm itself accepts long names, but `squeue -o %j` and fixed-width sacct columns truncate, and
# a name must stay greppable in both; 64 characters keeps every name whole in the default views.
MAX_JOB_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_DIGEST_LEN = 10


def sanitize(text: str) -> str:
    """Replace every run of characters outside ``[A-Za-z0-9_.-]`` by one ``_``."""
    return _UNSAFE.sub("_", text).strip("_.-")


def job_name(dag_id: str, task_id: str, run_id: str, map_index: int | None = None, prefix: str = "af") -> str:
    """Return the Slurm job name of one task instance (the same for every try of it).

    The readable part (dag, task, map index) may be truncated; the digest over the full identity
    (including the run id, which is long and mostly timestamps) keeps names of different task
    instances distinct, so a name found in squeue re-attaches to the right task instance only.
    """
    index = -1 if map_index is None else map_index
    readable = f"{prefix}-{dag_id}-{task_id}" + (f"-m{index}" if index >= 0 else "")
    return stable_name(readable, (dag_id, task_id, run_id, str(index)))


def stable_name(readable: str, identity: Sequence[str]) -> str:
    """A job name: ``readable`` (sanitized, truncated to fit) and a digest over every ``identity`` part.

    Callers whose jobs outlive one run (a job adopted by the next run) leave the run id out of
    ``identity``; the digest still tells apart identities whose readable parts truncate alike.
    """
    digest = hashlib.sha256("\x1f".join(identity).encode()).hexdigest()[:_DIGEST_LEN]
    room = MAX_JOB_NAME - _DIGEST_LEN - 1
    return f"{sanitize(readable)[:room].rstrip('_.-')}-{digest}"


def attempt_output_path(remote_dir: str, name: str) -> str:
    """Per-attempt log path: Slurm replaces ``%j`` by the job id, so no attempt overwrites another."""
    return f"{remote_dir.rstrip('/')}/{name}-%j.out"


def attempt_script_base(remote_dir: str, name: str) -> str:
    """The script copies' common prefix: ``<base>.attemptNNN.sbatch`` (``commands.submit_attempt``)."""
    return f"{remote_dir.rstrip('/')}/scripts/{name}"


def attempt_script_path(remote_dir: str, name: str, attempt: int) -> str:
    """Remote path of the copy of the sbatch script submitted for one attempt (kept for provenance)."""
    return f"{attempt_script_base(remote_dir, name)}.attempt{attempt:03d}.sbatch"


# What our cancels write into the marker. "hung" must stay the first word: a later try reads it
# back to record a hung attempt its try died before recording.
HUNG_REASON = "hung"
FATAL_REASON = "fatal"  # ``fatal: <rule>: <line>``: the running job's log matched a fatal pattern
ON_KILL_REASON = "on_kill: the task was stopped while its job ran (marked failed/success, or cleared)"
TIMEOUT_REASON = "execution_timeout: the deferral timed out"


def fatal_marker(rule: str, line: str) -> str:
    """The marker's text for a cancel by the fatal rule ``rule`` on the log line ``line``."""
    return f"{FATAL_REASON}: {rule}: {line}"


def parse_fatal_marker(reason: str) -> tuple[str, str] | None:
    """(rule, line) of a marker ``fatal_marker`` wrote; None for any other cancel of ours."""
    kind, _, rest = reason.strip().partition(": ")
    if kind != FATAL_REASON:
        return None
    rule, _, line = rest.partition(": ")
    return rule, line.strip()


def cancel_marker_path(log_path: str) -> str:
    """The file this plugin writes next to a job's log just before it cancels the job itself.

    Slurm records every cancel as ``CANCELLED by <uid>``, and the plugin cancels as the same user
    a person would: only this file tells a cancel of ours (hung, on_kill, execution_timeout) from
    one from outside Airflow.
    """
    return f"{log_path}.airflow-cancel"


def resolve_output_path(template: str, job_id: str, name: str = "") -> str:
    """Expand ``%j`` (job id), ``%x`` (job name) and ``%%`` of an sbatch ``--output`` pattern."""
    out: list[str] = []
    i = 0
    while i < len(template):
        ch = template[i]
        if ch == "%" and i + 1 < len(template):
            nxt = template[i + 1]
            if nxt == "j":
                out.append(job_id)
                i += 2
                continue
            if nxt in "x%":
                out.append(name if nxt == "x" else "%")
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)
