"""What the operator asks the cluster about an ended attempt: completion checks, progress probe, log tail."""

from __future__ import annotations

import logging
from collections.abc import Callable

from slurm_operator.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.hooks import SlurmHook
from slurm_operator.records import Attempt
from slurm_operator.resubmission import completion_command_says_done, completion_regex_matches

log = logging.getLogger(__name__)

TAIL_BYTES = 256 * 1024
TAIL_LINES = 20

CompletionCheck = Callable[[SlurmHook, Attempt], bool]


def completion_ok(
    hook: SlurmHook,
    attempt: Attempt,
    *,
    regex: str | None,
    command: str | None,
    check: CompletionCheck | None,
) -> bool | None:
    """All configured checks pass (True), one fails (False), or none is configured (None)."""
    checks: list[bool] = []
    if regex is not None:
        checks.append(completion_regex_matches(regex, read_tail(hook, attempt.log_path)))
    if command is not None:
        result = hook.run(command)
        checks.append(result.exit_status == 0 and completion_command_says_done(result.stdout))
    if check is not None:
        checks.append(bool(check(hook, attempt)))
    return all(checks) if checks else None


def probe_progress(hook: SlurmHook, command: str) -> str | None:
    """The progress command's output (stripped); None when it failed: unknown, never "no change"."""
    try:
        result = hook.run(command)
    except SlurmError as exc:
        log.warning("progress command failed: %s", exc)
        return None
    return result.stdout.strip() if result.exit_status == 0 else None


def read_tail(hook: SlurmHook, path: str) -> str:
    """The last TAIL_BYTES of a remote log, or a note saying why it cannot be read."""
    try:
        size = hook.stat(path).size
        return hook.read_log(path, max(0, size - TAIL_BYTES), TAIL_BYTES).text
    except (RemotePathNotFoundError, SlurmError) as exc:
        return f"<log unreadable: {exc}>"


def log_tail(hook: SlurmHook, path: str) -> str:
    """The last TAIL_LINES lines of a remote log, for failure messages."""
    return "\n".join(read_tail(hook, path).splitlines()[-TAIL_LINES:])
