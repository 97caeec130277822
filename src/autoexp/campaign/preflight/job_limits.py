"""The user's Slurm job limits (association and QOS), read with sacctmgr, and the pool size they allow.

Each task of a campaign's pool holds at most one Slurm job, running or pending, so a pool of N slots
keeps at most N jobs in the queue: N must stay at or below the tightest submit limit (``MaxSubmitJobs``
of the association, ``MaxSubmitJobsPerUser`` of its QOS, or a group's ``GrpSubmitJobs``), or Slurm
refuses the submits above it (they are retried later, but each refusal is a wasted round). A running
limit (``MaxJobs``, ``MaxJobsPerUser``, ``GrpJobs``) refuses nothing: the jobs above it wait PENDING.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_POOL_SLOTS = 8  # a new pool's size when neither the user nor a limit says otherwise

_ASSOC: tuple[str, ...] = (
    "Account",
    "Partition",
    "QOS",
    "MaxJobs",
    "MaxSubmitJobs",
    "GrpJobs",
    "GrpSubmitJobs",
)
_ASSOC += ("MaxTRES", "GrpTRES")
_QOS = ("Name", "MaxJobsPerUser", "MaxSubmitJobsPerUser", "GrpJobs", "GrpSubmitJobs", "MaxTRESPerUser")
# One remote command: the user's associations, then every QOS (the ones the associations name are kept).
COMMAND = (
    f'u=$(id -un) && echo "#assoc" && sacctmgr -nP show assoc where user="$u" format={",".join(_ASSOC)} && '
    f'echo "#qos" && sacctmgr -nP show qos format={",".join(_QOS)}'
)
_SUBMIT = {"MaxSubmitJobs", "GrpSubmitJobs", "MaxSubmitJobsPerUser"}
_RUNNING = {"MaxJobs", "GrpJobs", "MaxJobsPerUser"}


class LimitsParseError(ValueError):
    """sacctmgr printed something else than the rows asked for; the message quotes it."""


@dataclass(frozen=True)
class Limit:
    """One limit: its sacctmgr name, its value, and where it is set (``association alice/proj``)."""

    name: str
    value: int
    source: str


def words(limit: Limit | None) -> str:
    return "unlimited" if limit is None else f"{limit.name} {limit.value} ({limit.source})"


@dataclass(frozen=True)
class JobLimits:
    """The tightest submit and running limits that apply to the user's jobs (None: unlimited)."""

    submit: Limit | None
    running: Limit | None
    tres: tuple[str, ...] = ()  # MaxTRES/GrpTRES limits, shown as sacctmgr prints them

    def pool_slots(self, wanted: int) -> int:
        """The most slots a pool may have under the submit limit."""
        return wanted if self.submit is None else max(1, min(wanted, self.submit.value))

    def describe(self) -> str:
        return "; ".join([f"submit: {words(self.submit)}", f"running: {words(self.running)}", *self.tres])


def _tightest(limits: Sequence[Limit]) -> Limit | None:
    return min(limits, key=lambda limit: limit.value) if limits else None


def _number(name: str, text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit():
        raise LimitsParseError(f"sacctmgr printed a {name} that is not a number: {text!r}")
    return int(text)


def parse(stdout: str, account: str | None = None, qos: str | None = None) -> JobLimits:
    """The limits for ``account`` (all the user's associations when None) and their QOS (or ``qos``)."""
    section = ""
    assoc_rows: list[dict[str, str]] = []
    qos_rows: dict[str, dict[str, str]] = {}
    for line in stdout.splitlines():
        if line in ("#assoc", "#qos"):
            section = line
            continue
        if not line.strip():
            continue
        fields = line.split("|")
        names = _ASSOC if section == "#assoc" else _QOS if section == "#qos" else ()
        if len(fields) < len(names) or not names:
            raise LimitsParseError(f"unexpected sacctmgr output line: {line!r}")
        row = dict(zip(names, fields, strict=False))
        if section == "#assoc":
            assoc_rows.append(row)
        else:
            qos_rows[row["Name"]] = row
    if section != "#qos":
        raise LimitsParseError(f"sacctmgr printed no QOS section: {stdout.strip()[-300:]!r}")
    rows = [r for r in assoc_rows if account is None or r["Account"] == account]
    found: list[Limit] = []
    tres: list[str] = []
    qos_names: set[str] = {qos} if qos else set()
    for row in rows:
        where = f"association {row['Account']}" + (f"/{row['Partition']}" if row["Partition"] else "")
        for name in _SUBMIT | _RUNNING:
            if (value := _number(name, row.get(name, ""))) is not None:
                found.append(Limit(name, value, where))
        tres += [f"{key} {row[key]} ({where})" for key in ("MaxTRES", "GrpTRES") if row[key]]
        if not qos:
            qos_names.update(q for q in row["QOS"].split(",") if q)
    for name in sorted(qos_names):
        row = qos_rows.get(name, {})
        for field in _SUBMIT | _RUNNING:
            if (value := _number(field, row.get(field, ""))) is not None:
                found.append(Limit(field, value, f"QOS {name}"))
        if row.get("MaxTRESPerUser"):
            tres.append(f"MaxTRESPerUser {row['MaxTRESPerUser']} (QOS {name})")
    return JobLimits(
        submit=_tightest([f for f in found if f.name in _SUBMIT]),
        running=_tightest([f for f in found if f.name in _RUNNING]),
        tres=tuple(tres),
    )


def pool_fit(limits: JobLimits, pool: str, slots: int) -> tuple[bool, str]:
    """Whether a pool of ``slots`` fits under ``limits``, and the words that say so."""
    if limits.submit is not None and slots > limits.submit.value:
        return False, (
            f"pool {pool} has {slots} slots, above {words(limits.submit)}: Slurm would refuse the "
            f"submits above it; run `autoexp airflow-setup` with this config (it sizes the pool within) or "
            f"--slots {limits.submit.value}"
        )
    text = f"pool {pool} ({slots} slots) fits; {limits.describe()}"
    if limits.running is not None and slots > limits.running.value:
        text += f"; at most {limits.running.value} run at once, the others wait PENDING"
    return True, text


class _Remote(Protocol):
    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> Any: ...


def read(remote: _Remote, account: str | None = None, qos: str | None = None) -> JobLimits:
    """The limits, over ``remote`` (the plugin's SSH hook); LimitsParseError says why in one line."""
    result = remote.run(COMMAND, timeout=60)
    if result.exit_status != 0:
        text = (result.stderr or result.stdout).strip()
        last = text.splitlines()[-1] if text else f"exit status {result.exit_status}"
        raise LimitsParseError(f"sacctmgr failed on the login node: {last}")
    return parse(result.stdout, account, qos)
