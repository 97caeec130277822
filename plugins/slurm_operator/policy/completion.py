"""Is the work done: the one evaluator of a job's completion rule (a regex in its log tail, a command).

A COMPLETED job may have stopped before its work was done (a trainer that saved and exited ahead of
its time limit), so "done" is the caller's rule: ``completion_regex`` must occur in the last
``TAIL_BYTES`` of the job's log, and ``completion_command`` must exit 0 printing ``1``
(AutoExperiment's termination_cmd contract). ``work_done`` decides from what was read, without
I/O; ``check`` (a worker's hook) and ``check_async`` (the triggerer's) read it. The operator's
judgment, the trigger that ends a task on success and a campaign's "done before submitting" all ask
here, so the three cannot drift apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.model.records import CommandResult, LogChunk, RemoteStat

# The log tail a completion regex, a fatal rule and a failure's error lines are read from.
TAIL_BYTES = 256 * 1024


@dataclass(frozen=True)
class CompletionRule:
    """The configured checks (None: not configured).

    :param regex: must occur in the log tail (multi-line mode: ``^`` and ``$`` match at lines).
    :param command: a remote command that must exit 0 printing ``1``.
    """

    regex: str | None = None
    command: str | None = None

    @property
    def configured(self) -> bool:
        return self.regex is not None or self.command is not None


def regex_matches(pattern: str, log_tail: str) -> bool:
    """True when the completion regex occurs in the log text (multi-line mode)."""
    return re.search(pattern, log_tail, re.MULTILINE) is not None


def says_done(stdout: str) -> bool:
    """A completion command says done by printing 1 (AutoExperiment's termination_cmd contract)."""
    return stdout.strip() == "1"


def command_done(result: CommandResult) -> bool:
    """The completion command ran, exited 0 and printed 1; a failing command is "not done"."""
    return result.exit_status == 0 and says_done(result.stdout)


def work_done(rule: CompletionRule, result: CommandResult | None, log_tail: str | None) -> bool | None:
    """Every configured check passes (True), one fails (False), or none is configured (None).

    ``result``: the completion command's, ``log_tail``: the log's last bytes (None: not read, which
    fails a configured regex).
    """
    checks: list[bool] = []
    if rule.regex is not None:
        checks.append(log_tail is not None and regex_matches(rule.regex, log_tail))
    if rule.command is not None:
        checks.append(result is not None and command_done(result))
    return all(checks) if checks else None


# ----------------------------------------------------------------------------------- asking the cluster
class _Hook(Protocol):
    def run(self, command: str) -> CommandResult: ...

    def stat(self, path: str) -> RemoteStat: ...

    def read_log(self, path: str, offset: int = ..., max_bytes: int = ...) -> LogChunk: ...


class _AsyncHook(Protocol):
    async def run(self, command: str) -> CommandResult: ...

    async def stat(self, path: str) -> RemoteStat: ...

    async def read_log(self, path: str, offset: int = ..., max_bytes: int = ...) -> LogChunk: ...


def check(hook: _Hook, rule: CompletionRule, log_path: str | None) -> bool | None:
    """``work_done`` with the tail and the command read by a worker's hook (only those configured).
    An unreadable log reads as a note saying why, which a regex does not match."""
    tail = read_tail(hook, log_path) if rule.regex is not None and log_path else None
    result = hook.run(rule.command) if rule.command is not None else None
    return work_done(rule, result, tail)


async def check_async(hook: _AsyncHook, rule: CompletionRule, log_path: str | None) -> bool | None:
    """``check`` in the triggerer; a read or command that fails raises (the caller then leaves the
    judgment to the operator)."""
    tail = None
    if rule.regex is not None and log_path:
        size = (await hook.stat(log_path)).size
        tail = (await hook.read_log(log_path, max(0, size - TAIL_BYTES), TAIL_BYTES)).text
    result = await hook.run(rule.command) if rule.command is not None else None
    return work_done(rule, result, tail)


def read_tail(hook: _Hook, path: str) -> str:
    """The last TAIL_BYTES of a remote log, or a note saying why it cannot be read."""
    try:
        size = hook.stat(path).size
        return hook.read_log(path, max(0, size - TAIL_BYTES), TAIL_BYTES).text
    except (RemotePathNotFoundError, SlurmError) as exc:
        return f"<log unreadable: {exc}>"
