"""SlurmHook.run's reconnect rule: an sbatch whose connection broke after sending is never re-sent.

A fake transport is used on purpose: a real sshd cannot be made to drop a session at the exact
moment between sending a command and reading its answer.
"""

from __future__ import annotations

import pytest
from slurm_operator.exceptions import SlurmConnectionError
from slurm_operator.hooks import SlurmHook
from slurm_operator.records import CommandResult


class _BreaksAfterSending:
    """Stands in for SlurmHook._run_once: the first call breaks after the command went out."""

    def __init__(self, break_before_sending: bool = False) -> None:
        self.calls: list[str] = []
        self.break_before_sending = break_before_sending

    def __call__(
        self, command: str, stdin: str | None, timeout: float | None, sent: list[bool]
    ) -> CommandResult:
        self.calls.append(command)
        if len(self.calls) == 1:
            if not self.break_before_sending:
                sent.append(True)
            raise ConnectionResetError("Connection reset by peer")
        return CommandResult(0, "42\n", "")


def _hook(monkeypatch: pytest.MonkeyPatch, fake: _BreaksAfterSending) -> SlurmHook:
    hook = SlurmHook("unused")
    monkeypatch.setattr(hook, "_run_once", fake)
    monkeypatch.setattr(hook, "close", lambda: None)
    return hook


def test_submit_is_not_resent_after_the_command_reached_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _BreaksAfterSending()
    hook = _hook(monkeypatch, fake)
    with pytest.raises(SlurmConnectionError, match=r"not re-sending it, its outcome is unknown: .*sbatch"):
        hook.submit(script_path="/tmp/job.sh")
    assert len(fake.calls) == 1


def test_submit_is_resent_when_the_break_came_before_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _BreaksAfterSending(break_before_sending=True)
    hook = _hook(monkeypatch, fake)
    assert hook.submit(script_path="/tmp/job.sh") == "42"
    assert len(fake.calls) == 2


def test_idempotent_queries_are_retried_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _BreaksAfterSending()
    hook = _hook(monkeypatch, fake)
    assert hook.run("squeue --me").stdout == "42\n"
    assert len(fake.calls) == 2
