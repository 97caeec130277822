"""RemotePathTrigger: serialization, the built-in log regex, a pluggable condition, and the loop's endings.

The remote side is faked (an in-memory file tree answering like the async hook): what is tested is
the loop's logic. The sensors run it against the real cluster in tests/slurm_operator/integration.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from airflow.sdk.module_loading import import_string
from slurm_operator.model import events
from slurm_operator.model.events import SlurmEvent
from slurm_operator.triggers import remote_path as path_triggers
from slurm_operator.triggers.remote_path import PathCondition, RemoteFiles, RemotePathTrigger
from slurm_operator.triggers.serialization import class_path

from tests.support.fake_slurm import FakeSlurm


class Appears(PathCondition):
    """A file named ``name`` is in the folder (a condition the plugin knows nothing of)."""

    fatal: ClassVar[tuple[type[Exception], ...]] = (LookupError,)

    def __init__(self, name: str) -> None:
        self.name = name

    def waits_for(self, path: str) -> str:
        return f"{self.name} in {path}"

    def done_message(self, path: str) -> str:
        return f"{self.name} appeared in {path}"

    async def check(self, files: RemoteFiles, path: str) -> dict[str, Any] | None:
        entries = await files.list_dir(path)
        if "GARBLED" in entries:
            raise LookupError("GARBLED: nothing can be read here")
        return {"found": self.name} if self.name in entries else None


@pytest.fixture
def remote(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm()
    monkeypatch.setattr(path_triggers, "AsyncSlurmHook", lambda _c: fake)
    return fake


KWARGS: dict[str, Any] = {
    "ssh_conn_id": "slurm_local",
    "path": "/out",
    "pattern": None,
    "condition": class_path(Appears),
    "condition_kwargs": {"name": "done.txt"},
    "poll_interval": 0.01,
    "log_offset": 0,
    "failure_budget": 100.0,
    "carry": {"k": 1},
    "min_defer_seconds": 0.0,
    "batched": False,  # the fake answers SFTP-style calls; the batched loop: test_path_triggers_batched
}


@pytest.mark.parametrize(
    "kwargs",
    [KWARGS, {**KWARGS, "pattern": "after training", "condition": None, "condition_kwargs": {}}],
    ids=["condition", "pattern"],
)
def test_serialize_returns_every_argument_and_an_importable_classpath(kwargs: dict[str, Any]) -> None:
    classpath, out = RemotePathTrigger(**kwargs).serialize()
    assert out == kwargs
    assert classpath == "slurm_operator.triggers.remote_path.RemotePathTrigger"
    rebuilt = import_string(classpath)(**out)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert KWARGS["condition"] == "tests.slurm_operator.triggers.test_remote_path.Appears"


def test_exactly_one_of_pattern_and_condition() -> None:
    for bad in ({"condition": None}, {"pattern": "x"}):
        with pytest.raises(ValueError, match=r"^RemotePathTrigger for /out: give exactly one of pattern"):
            RemotePathTrigger(**{**KWARGS, **bad})


async def _events(trigger: Any) -> list[SlurmEvent]:
    return [SlurmEvent.from_payload(e.payload) async for e in trigger.run()]


async def test_regex_trigger_finds_a_marker_split_across_reads(remote: FakeSlurm) -> None:
    remote.files["/r/log"] = "iteration 5\n[after training is done] at 9\n"
    trig = RemotePathTrigger(
        "c",
        "/r/log",
        pattern=r"after training is done",
        poll_interval=0.01,
        min_defer_seconds=0,
        batched=False,
    )
    (ev,) = await _events(trig)
    assert ev.status == events.SUCCESS
    assert ev.data == {"match": "[after training is done] at 9"}
    assert ev.message == "'after training is done' found in /r/log"
    assert ev.log_offset == len(remote.files["/r/log"])


async def test_the_regex_matches_an_unterminated_last_line_and_reads_on_from_there() -> None:
    files = FakeSlurm()
    cond = path_triggers.LogPattern("done", offset=5)
    files.files["/log"] = "skip\nstill going\nalmost"
    assert await cond.check(files, "/log") is None
    files.files["/log"] += " done"  # the writer may never add the newline
    assert await cond.check(files, "/log") == {"match": "almost done"}
    assert cond.offset == len(files.files["/log"])


async def test_a_pluggable_condition_is_rebuilt_from_its_import_path(remote: FakeSlurm) -> None:
    remote.dirs["/out"] = ["a.txt", "done.txt"]
    (ev,) = await _events(RemotePathTrigger(**KWARGS))
    assert (ev.status, ev.message, ev.data, ev.carry) == (
        events.SUCCESS,
        "done.txt appeared in /out",
        {"found": "done.txt"},
        {"k": 1},
    )


async def test_connection_failures_are_retried_within_the_failure_budget(remote: FakeSlurm) -> None:
    remote.dirs["/out"] = ["done.txt"]
    remote.down = 3
    (ev,) = await _events(RemotePathTrigger(**KWARGS))
    assert ev.status == events.SUCCESS


async def test_a_spent_failure_budget_says_what_the_wait_was_for(remote: FakeSlurm) -> None:
    remote.down = 10**6
    (ev,) = await _events(RemotePathTrigger(**{**KWARGS, "failure_budget": 0.05}))
    assert ev.status == events.ERROR
    assert ev.message.startswith("gave up waiting for done.txt in /out: no successful check for 0 s, ")
    assert "ssh: connection refused; check the SSH connection 'slurm_local' and the path" in ev.message


async def test_a_fatal_error_of_the_condition_ends_the_wait_at_once(remote: FakeSlurm) -> None:
    remote.dirs["/out"] = ["GARBLED"]
    (ev,) = await _events(RemotePathTrigger(**KWARGS))
    assert (ev.status, ev.message) == (events.ERROR, "/out: GARBLED: nothing can be read here")


async def test_a_condition_that_is_not_one_ends_the_wait_as_a_crash(remote: FakeSlurm) -> None:
    (ev,) = await _events(
        RemotePathTrigger(**{**KWARGS, "condition": "slurm_operator.model.events.SlurmEvent"})
    )
    assert ev.status == events.ERROR
    assert ev.message == (
        "trigger crashed: TypeError: condition 'slurm_operator.model.events.SlurmEvent' "
        "is not a PathCondition"
    )


async def test_a_condition_that_already_holds_is_held_for_min_defer_seconds(
    remote: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not before the scheduler processed the deferral (docs/slurm-operator.md#airflow-332-workarounds)."""
    remote.dirs["/out"] = ["done.txt"]
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(path_triggers.asyncio, "sleep", sleep)
    (ev,) = await _events(RemotePathTrigger(**{**KWARGS, "min_defer_seconds": 30.0}))
    assert ev.status == events.SUCCESS
    assert len(waits) == 1
    assert 29.0 < waits[0] <= 30.0
