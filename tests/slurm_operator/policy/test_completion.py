"""The one "is the work done" evaluator: the pure decision, and its sync and async readers agree."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from slurm_operator.model.exceptions import RemotePathNotFoundError
from slurm_operator.model.records import CommandResult, LogChunk, RemoteStat
from slurm_operator.policy import completion
from slurm_operator.policy.completion import CompletionRule, regex_matches, says_done, work_done

LOG = "iteration 10\n[after training is done] ...\nsaving\n"
DONE = CommandResult(0, "1\n", "")


def test_the_regex_and_the_command_contract() -> None:
    assert regex_matches(r"^\[after training is done\]", LOG)
    assert not regex_matches(r"after training is done$", "after training is done soon")
    assert says_done("1\n")
    assert not says_done("0\n")
    assert not says_done("10")
    assert completion.command_done(DONE)
    assert not completion.command_done(CommandResult(1, "1\n", ""))  # a failing command: not done


@pytest.mark.parametrize(
    ("rule", "result", "tail", "expected"),
    [
        (CompletionRule(), None, None, None),  # nothing configured: COMPLETED is done
        (CompletionRule(regex="done"), None, LOG, True),
        (CompletionRule(regex="finished"), None, LOG, False),
        (CompletionRule(regex="done"), None, None, False),  # a tail not read cannot pass
        (CompletionRule(command="c"), DONE, None, True),
        (CompletionRule(command="c"), CommandResult(0, "0\n", ""), None, False),
        (CompletionRule(command="c"), CommandResult(2, "1\n", ""), None, False),
        (CompletionRule(regex="done", command="c"), DONE, LOG, True),
        (CompletionRule(regex="finished", command="c"), DONE, LOG, False),
    ],
)
def test_work_done_decides_from_what_was_read(
    rule: CompletionRule, result: CommandResult | None, tail: str | None, expected: bool | None
) -> None:
    assert work_done(rule, result, tail) is expected


class _Hook:
    """One log and one command answer, for both wrappers."""

    def __init__(self, log: str | None, result: CommandResult) -> None:
        self.log, self.result = log, result
        self.commands: list[str] = []

    def run(self, command: str) -> CommandResult:
        self.commands.append(command)
        return self.result

    def stat(self, path: str) -> RemoteStat:
        if self.log is None:
            raise RemotePathNotFoundError(path)
        return RemoteStat(path, True, size=len(self.log))

    def read_log(self, path: str, offset: int = 0, max_bytes: int = 0) -> LogChunk:
        assert self.log is not None
        return LogChunk(self.log[offset : offset + max_bytes], offset, offset + max_bytes)


class _AsyncHook:
    def __init__(self, hook: _Hook) -> None:
        self.hook = hook

    async def run(self, command: str) -> CommandResult:
        return self.hook.run(command)

    async def stat(self, path: str) -> RemoteStat:
        return self.hook.stat(path)

    async def read_log(self, path: str, offset: int = 0, max_bytes: int = 0) -> LogChunk:
        return self.hook.read_log(path, offset, max_bytes)


@pytest.mark.parametrize("result", [DONE, CommandResult(0, "0\n", "")])
@pytest.mark.parametrize("regex", [None, "done", "finished"])
def test_the_worker_and_the_triggerer_read_and_decide_alike(regex: str | None, result: CommandResult) -> None:
    rule = CompletionRule(regex=regex, command="check_done")
    sync, other = _Hook(LOG, result), _Hook(LOG, result)
    hook: Any = _AsyncHook(other)
    in_triggerer = asyncio.run(completion.check_async(hook, rule, "/r/j.out"))
    assert completion.check(sync, rule, "/r/j.out") == in_triggerer
    assert sync.commands == other.commands == ["check_done"]


def test_an_unreadable_log_is_not_done_in_the_worker_and_raises_in_the_triggerer() -> None:
    rule = CompletionRule(regex="done")
    assert completion.check(_Hook(None, DONE), rule, "/r/j.out") is False
    hook: Any = _AsyncHook(_Hook(None, DONE))
    with pytest.raises(RemotePathNotFoundError):  # the trigger then leaves the judgment to the operator
        asyncio.run(completion.check_async(hook, rule, "/r/j.out"))
