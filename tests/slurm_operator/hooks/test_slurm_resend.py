"""SlurmHook.run's reconnect rule: an sbatch whose connection broke after sending is never re-sent.

A fake transport is used on purpose: a real sshd cannot be made to drop a session at the exact
moment between sending a command and reading its answer.
"""

from __future__ import annotations

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.exceptions import SlurmConnectionError
from slurm_operator.model.records import CommandResult


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


class _LateOutputChannel:
    """A session whose exit status comes before its last output, then EOF: what sshd did once under
    load (a start condition's "1" lost). Faked: a real sshd cannot be made to send them in this order."""

    def __init__(self, eof: bool = True) -> None:
        self.ticks = 0
        self.chunks = [b"1\n"]
        self.eof_received = False
        self.closed = False
        self.eof = eof
        self.status_event = self

    def wait(self, _timeout: float) -> bool:
        return True

    def _tick(self) -> None:
        self.ticks += 1
        if self.ticks == 3:  # the output arrives two polls after the exit status
            self.buffer = self.chunks.pop()
        if self.ticks == 5:
            self.eof_received = self.eof

    buffer = b""

    def settimeout(self, _t: float) -> None: ...

    def exec_command(self, _c: str) -> None: ...

    def shutdown_write(self) -> None: ...

    def close(self) -> None: ...

    def recv_ready(self) -> bool:
        return bool(self.buffer)

    def recv(self, _n: int) -> bytes:
        data, self.buffer = self.buffer, b""
        return data

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        self._tick()
        return True

    def recv_exit_status(self) -> int:
        return 0


def _session_hook(monkeypatch: pytest.MonkeyPatch, channel: _LateOutputChannel) -> SlurmHook:
    class Transport:
        def open_session(self, timeout: float) -> _LateOutputChannel:
            return channel

    class Client:
        def get_transport(self) -> Transport:
            return Transport()

    hook = SlurmHook("unused")
    monkeypatch.setattr(hook, "get_conn", lambda: Client())
    return hook


def test_output_that_comes_after_the_exit_status_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    channel = _LateOutputChannel()
    assert _session_hook(monkeypatch, channel).run("start-condition").stdout == "1\n"
    assert channel.eof_received


def test_a_command_whose_eof_never_comes_ends_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child left in the background may hold the output open: the exit status still ends it."""
    monkeypatch.setattr("slurm_operator.hooks.slurm.EOF_GRACE_S", 0.2)
    channel = _LateOutputChannel(eof=False)
    assert _session_hook(monkeypatch, channel).run("cmd &").stdout == "1\n"
