"""Trace: the plugin files one sacct answer crosses from the parser to the task's outcome.

One TIMEOUT row, as sacct prints it, goes through the whole path with no SSH and no Airflow service:
the async hook's ``job_states`` (its remote command answered from memory, then parsed), the shared
poller, the ``SlurmJobTrigger`` that turns the record into its one final event; that event, through
its JSON form, into ``SlurmOperator.execute_complete``, which judges the attempt (TIMEOUT is
resubmittable) and stores the ledger. The next submission is the next trip, not this one's outcome:
the operator here records the verdict and returns the attempt list instead of submitting.

``sys.settrace`` follows the innermost plugin frame: it prints the plugin files entered, in order,
and how many times the path came back to a file it had left (a ``decide`` that calls out and back
counts once per return). One tracer runs across both sides, so a file both touch counts once.
Run: .venv/bin/python bench/trace_outcome.py  (``--json`` prints the figures as JSON)
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "plugins" / "slurm_operator"
sys.path.insert(0, str(REPO / "plugins"))  # run as `python bench/trace_outcome.py`

from airflow.triggers.base import TriggerEvent  # noqa: E402
from slurm_operator.hooks.slurm_async import AsyncSlurmHook  # noqa: E402
from slurm_operator.model.ledger import Attempt, Ledger  # noqa: E402
from slurm_operator.model.records import CommandResult  # noqa: E402
from slurm_operator.operators.slurm import SlurmOperator  # noqa: E402
from slurm_operator.remote.commands import SECTION_MARK  # noqa: E402
from slurm_operator.triggers import slurm_job  # noqa: E402
from slurm_operator.triggers.job_poller import SlurmPoller  # noqa: E402
from slurm_operator.triggers.slurm_job import SlurmJobTrigger  # noqa: E402

T = TypeVar("T")
JOB = "7"
LOG = "/scratch/run/logs/train-7.out"
# What the batched state query prints for a job that hit its time limit (``commands.job_states``).
SACCT_ANSWER = (
    f"{SECTION_MARK} sacct 0\n"
    f"{JOB}|train|TIMEOUT|0:0|01:00:00|2026-12-03T10:00:00|2026-12-03T11:00:00|n1|cpu=2,gres/gpu=1|TimeLimit\n"
)


@dataclass
class Crossings:
    """The plugin files one path entered (in order) and how often it came back to one it had left."""

    files: list[str] = field(default_factory=list)
    returns: int = 0
    where: str | None = None

    def move(self, frame: FrameType | None) -> None:
        """The innermost plugin frame from ``frame`` outward is where the path is now."""
        while frame is not None and not frame.f_code.co_filename.startswith(str(PLUGIN)):
            frame = frame.f_back
        if frame is None:
            return
        name = str(Path(frame.f_code.co_filename).relative_to(PLUGIN).with_suffix(""))
        if name == self.where:
            return
        if name in self.files:
            self.returns += 1
        else:
            self.files.append(name)
        self.where = name

    def trace(self, frame: FrameType, event: str, _arg: Any) -> Any:
        if event == "call":
            self.move(frame)
            if frame.f_code.co_filename.startswith(str(PLUGIN)):
                frame.f_trace_lines = False
                return self.trace  # to see it return
            return None
        if event == "return":
            self.move(frame.f_back)
        return self.trace


class _AnsweringHook(AsyncSlurmHook):
    """The async hook with its one remote command answered from memory (the parsing is the real one)."""

    async def run(
        self, command: str, *, stdin: str | None = None, limit_s: float | None = None
    ) -> CommandResult:
        return CommandResult(0, SACCT_ANSWER, "")


class _Judged(SlurmOperator):
    """The operator with the cluster and the next submission left out of this trip."""

    def _hook(self) -> Any:
        return object()  # a TIMEOUT's judgment asks the cluster nothing without a progress command

    def _submit(self, context: Any, hook: Any, ledger: Ledger) -> None:
        pass

    def _wait(self, context: Any, hook: Any, ledger: Ledger) -> list[dict[str, Any]]:
        return ledger.results()


class _Store:
    """The task state store (``task_state``)."""

    def __init__(self) -> None:
        self.value: Any = None

    def get(self, key: str) -> Any:
        return self.value

    def set(self, key: str, value: Any, retention: Any = None) -> None:
        self.value = value


def _traced(crossings: Crossings | None, fn: Callable[[], T]) -> T:
    if crossings is None:
        return fn()
    sys.settrace(crossings.trace)
    try:
        return fn()
    finally:
        sys.settrace(None)


def poll_to_event(crossings: Crossings | None) -> dict[str, Any]:
    """The sacct answer, parsed, polled and turned into the trigger's final event (as stored: JSON)."""
    # One round: the first polls at once, the next would wait the interval (the trigger is gone by then).
    SlurmPoller.hook_factory = staticmethod(_AnsweringHook)
    vars(slurm_job)["AsyncSlurmHook"] = _AnsweringHook  # the trigger's own hook (unused: no log relay)
    carry = Ledger(name="train", attempts=[Attempt(1, JOB, LOG, "/scratch/run/scripts/train-1.sbatch")])
    trigger = SlurmJobTrigger(
        "cluster", JOB, poll_interval=60.0, log_path=LOG, stream_logs=False, carry=carry.to_dict(),
        min_defer_seconds=0.0,
    )  # fmt: skip

    async def first_event() -> dict[str, Any]:
        event: TriggerEvent = await anext(trigger.run())
        return dict(event.payload)

    payload = _traced(crossings, lambda: asyncio.run(first_event()))
    return dict(json.loads(json.dumps(payload)))  # as Airflow stores it


def event_to_outcome(crossings: Crossings | None, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The event through ``execute_complete`` to the attempt list (verdict: resubmit)."""
    op = _Judged(task_id="train", ssh_conn_id="cluster", remote_dir="/scratch/run", script="#!/bin/bash\n")
    context: Any = {"task_state_store": _Store()}
    return _traced(crossings, lambda: op.execute_complete(context, event=payload))


def measure() -> dict[str, Any]:
    """The figures of each side, and of the whole path through one tracer (a file both sides enter
    counts once, and the resume's coming back to a file the poll left counts as a return)."""
    event_to_outcome(None, poll_to_event(None))  # warm: lazy imports and first-use caches
    poll, resume, whole = Crossings(), Crossings(), Crossings()
    event_to_outcome(resume, poll_to_event(poll))
    (outcome,) = event_to_outcome(whole, poll_to_event(whole))
    return {
        "outcome": {"state": outcome["state"], "verdict": outcome["verdict"]},
        **{name: {"files": c.files, "returns": c.returns} for name, c in
           (("poll_to_event", poll), ("event_to_outcome", resume), ("whole", whole))},
    }  # fmt: skip


def main() -> None:
    figures = measure()
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=2))
        return
    print(f"outcome: {figures['outcome']}")
    for side in ("poll_to_event", "event_to_outcome", "whole"):
        files, returns = figures[side]["files"], figures[side]["returns"]
        print(f"{side}: {len(files)} files, {returns} returns to a file left: {', '.join(files)}")


if __name__ == "__main__":
    main()
