"""Every trigger's ``serialize()``: its class path and its constructor's arguments, base's included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string
from airflow.triggers.base import BaseTrigger, TriggerEvent
from slurm_operator.triggers.remote_path import RemotePathTrigger
from slurm_operator.triggers.serialization import arguments, class_path
from slurm_operator.triggers.slurm_job import SlurmJobTrigger


class Base(BaseTrigger):
    def __init__(self, a: int, b: str = "b") -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.a, self.b = a, b

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return class_path(type(self)), arguments(self, type(self))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        yield TriggerEvent(None)


class PassesOn(Base):
    def __init__(self, *args: Any, c: float = 1.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.c = c


class Drops(Base):
    def __init__(self, c: float, **_: Any) -> None:
        super().__init__(a=0)
        self.c = c


class Inherits(PassesOn):
    pass


@pytest.mark.parametrize(
    ("trigger", "expected"),
    [
        (Base(1), {"a": 1, "b": "b"}),
        (PassesOn(1, b="x", c=2.0), {"a": 1, "b": "x", "c": 2.0}),  # the base's arguments first
        (Drops(c=3.0, a=9), {"c": 3.0}),  # ``**_`` swallows the base's: they are not its own
        (Inherits(4), {"a": 4, "b": "b", "c": 1.0}),
    ],
)
def test_arguments_follow_the_constructors_that_pass_kwargs_on(
    trigger: BaseTrigger, expected: dict[str, Any]
) -> None:
    classpath, out = trigger.serialize()
    assert out == expected
    assert list(out) == list(expected)
    assert import_string(classpath)(**out).serialize() == (classpath, expected)


@pytest.mark.parametrize(
    ("cls", "stored"),
    [  # the class paths stored trigger rows hold: each was a hard-coded string before
        (SlurmJobTrigger, "slurm_operator.triggers.slurm_job.SlurmJobTrigger"),
        (RemotePathTrigger, "slurm_operator.triggers.remote_path.RemotePathTrigger"),
    ],
)
def test_the_derived_class_path_is_the_stored_one_and_imports_under_plugins(cls: type, stored: str) -> None:
    assert class_path(cls) == stored
    assert import_string(stored) is cls
