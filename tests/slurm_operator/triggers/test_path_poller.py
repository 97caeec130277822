"""PathPoller and batched RemotePathTriggers: one command per round for every wait, follow-ups, failures.

The hook runs the batched command with a local ``sh`` over real files (what the login node would
run; SSH adds nothing to it); a broken transport is faked (the one fault a local shell cannot make).
The over-SSH, server-counted version is tests/autoexp/campaign/triggerer/test_batched_waits_real.py.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any, ClassVar

import pytest
from slurm_operator.model import events
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.records import CommandResult
from slurm_operator.triggers import path_poller
from slurm_operator.triggers.path_poller import PathPoller
from slurm_operator.triggers.remote_path import PathCondition, RemoteFiles, RemotePathTrigger
from slurm_operator.triggers.serialization import class_path


class LocalShell:
    """Runs each command with a local ``sh``; ``down`` commands fail like a lost connection first."""

    def __init__(self) -> None:
        self.commands = 0
        self.requests: list[int] = []
        self.down = 0

    async def run(
        self, command: str, *, stdin: str | None = None, limit_s: float | None = None
    ) -> CommandResult:
        self.commands += 1
        self.requests.append((stdin or "").count("\n") // 4)
        if self.down:
            self.down -= 1
            return CommandResult(255, "", "ssh: connection refused")
        # In a thread, not an asyncio subprocess: on Python 3.12.1 a round cancelled while its
        # subprocess starts (the test loop's teardown cancels the poller task) never finishes
        # cancelling, and the teardown hangs; a thread ends on its own after the cancel.
        proc = await asyncio.to_thread(
            subprocess.run, ["sh", "-c", f"exec {command}"], input=stdin or "", capture_output=True, text=True
        )
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> LocalShell:
    sh = LocalShell()
    monkeypatch.setattr(PathPoller, "hook_factory", lambda _c: sh)
    monkeypatch.setattr(path_poller, "REPORT_WAIT", 0.5)
    return sh


class NestedFile(PathCondition):
    """``a/b/done`` exists below the path: three listings deep, learned one level per round."""

    fatal: ClassVar[tuple[type[Exception], ...]] = (LookupError,)

    def waits_for(self, path: str) -> str:
        return f"a/b/done in {path}"

    def done_message(self, path: str) -> str:
        return f"a/b/done is in {path}"

    async def check(self, files: RemoteFiles, path: str) -> dict[str, Any] | None:
        if "GARBLED" in await files.list_dir(path):
            raise LookupError("GARBLED")
        if "a" not in await files.list_dir(path) or "b" not in await files.list_dir(f"{path}/a"):
            return None
        return {"found": True} if "done" in await files.list_dir(f"{path}/a/b") else None


def nested(path: Path, **kw: Any) -> RemotePathTrigger:
    return RemotePathTrigger("c", str(path), condition=class_path(NestedFile), min_defer_seconds=0, **kw)


async def first(trigger: RemotePathTrigger, limit_s: float = 30) -> SlurmEvent:
    async def event() -> SlurmEvent:
        async for ev in trigger.run():
            return SlurmEvent.from_payload(ev.payload)
        raise AssertionError("no event")

    return await asyncio.wait_for(event(), limit_s)  # asyncio.timeout is Python 3.11+


async def test_many_waits_cost_one_command_per_interval(shell: LocalShell, tmp_path: Path) -> None:
    runs = [tmp_path / f"run{i}" for i in range(10)]
    for run in runs:
        (run / "a" / "b").mkdir(parents=True)
        (run / "log").write_text("step 1\n")
    triggers = [nested(run, poll_interval=0.5) for run in runs for _ in range(5)]
    triggers += [RemotePathTrigger("c", str(run / "log"), pattern="^done", poll_interval=0.5,
                                   min_defer_seconds=0) for run in runs for _ in range(5)]  # fmt: skip
    tasks = [asyncio.create_task(first(t)) for t in triggers]
    loop = asyncio.get_running_loop()
    try:
        # The first round and its follow-ups (learning a/, a/b/) are done once a round asks for all:
        # per run the log window and three listings, every distinct thing once.
        for _ in range(600):  # 30 s at most
            if shell.requests and shell.requests[-1] == 10 * 4:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"no round asked for everything in 30 s: {shell.requests}")
        await asyncio.sleep(0.1)
        before, start = shell.commands, loop.time()
        await asyncio.sleep(2.0)
        # Counted against the intervals that really passed (a loaded machine stretches the sleep).
        intervals = (loop.time() - start) / 0.5
        assert 1 <= shell.commands - before <= intervals + 1, (shell.commands - before, intervals)
        assert shell.requests[-1] == 10 * 4, shell.requests
        (runs[3] / "a" / "b" / "done").write_text("")
        (runs[7] / "log").write_text("step 1\ndone\n")

        async def ten_done() -> None:
            while sum(t.done() for t in tasks) < 10:
                await asyncio.wait([t for t in tasks if not t.done()], return_when=asyncio.FIRST_COMPLETED)

        await asyncio.wait_for(ten_done(), 30)
        done = [i for i, t in enumerate(tasks) if t.done()]
        assert done == [*range(15, 20), *range(85, 90)], done
        assert all(tasks[i].result().status == events.SUCCESS for i in done)
        assert tasks[85].result().data == {"match": "done"}
    finally:  # a failure here must not leave the poller running into the next test
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_what_a_check_had_not_asked_for_comes_in_follow_ups_within_the_interval(
    shell: LocalShell, tmp_path: Path
) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "done").write_text("")
    ev = await first(nested(tmp_path, poll_interval=3600))
    assert ev.status == events.SUCCESS, ev.message
    assert shell.commands == 3  # the folder, a/, a/b/: learned in three rounds of one interval


async def test_a_broken_connection_is_retried_then_the_budget_ends_the_wait(
    shell: LocalShell, tmp_path: Path
) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "done").write_text("")
    shell.down = 2
    assert (await first(nested(tmp_path, poll_interval=0.05))).status == events.SUCCESS
    shell.down = 10**6
    ev = await first(nested(tmp_path, poll_interval=0.05, failure_budget=0.3))
    assert ev.status == events.ERROR
    assert ev.message.startswith(f"gave up waiting for a/b/done in {tmp_path}: no successful check for 0 s")
    assert "ssh: connection refused; check the SSH connection 'c' and the path" in ev.message


async def test_a_fatal_condition_error_ends_only_its_own_wait(shell: LocalShell, tmp_path: Path) -> None:
    (tmp_path / "bad" / "GARBLED").mkdir(parents=True)
    (tmp_path / "good").mkdir()
    good = asyncio.create_task(first(nested(tmp_path / "good", poll_interval=0.05)))
    ev = await first(nested(tmp_path / "bad", poll_interval=0.05))
    assert (ev.status, ev.message) == (events.ERROR, f"{tmp_path / 'bad'}: GARBLED")
    await asyncio.sleep(0.2)
    assert not good.done()
    (tmp_path / "good" / "a" / "b" / "done").mkdir(parents=True)
    assert (await good).status == events.SUCCESS


async def test_the_poller_stops_when_the_last_wait_ends(shell: LocalShell, tmp_path: Path) -> None:
    (tmp_path / "a" / "b" / "done").mkdir(parents=True)
    await first(nested(tmp_path, poll_interval=0.05))
    await asyncio.sleep(0.2)
    count = shell.commands
    await asyncio.sleep(0.3)
    assert shell.commands == count
    assert not PathPoller._instances


class QuietFile(PathCondition):
    """``done`` exists below the path and stayed there for 0.3 s (a quiet period, like a checkpoint's)."""

    def __init__(self) -> None:
        self.seen: float | None = None

    def waits_for(self, path: str) -> str:
        return f"a quiet done in {path}"

    def done_message(self, path: str) -> str:
        return f"done in {path} stayed"

    async def check(self, files: RemoteFiles, path: str) -> dict[str, Any] | None:
        if "done" not in await files.list_dir(path):
            self.seen = None
            return None
        now = asyncio.get_running_loop().time()
        self.seen = self.seen if self.seen is not None else now
        return {"quiet": True} if now - self.seen >= 0.3 else None

    def recheck_in(self) -> float | None:
        return None if self.seen is None else 0.3


async def test_a_quiet_period_gets_an_early_round_not_a_whole_interval(
    shell: LocalShell, tmp_path: Path
) -> None:
    (tmp_path / "done").write_text("")
    trigger = RemotePathTrigger("c", str(tmp_path), condition=class_path(QuietFile), poll_interval=8,
                                min_defer_seconds=0)  # fmt: skip
    loop = asyncio.get_running_loop()
    start = loop.time()
    ev = await first(trigger)
    took = loop.time() - start
    assert ev.status == events.SUCCESS, ev.message
    # The first round sees the file; the next comes once the quiet period is over, but no sooner
    # than half an interval after the first (at most two commands per interval): ~4 s, not 8.
    assert shell.commands == 2
    assert 3.9 <= took < 7.5, took
