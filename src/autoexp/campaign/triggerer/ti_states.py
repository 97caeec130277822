"""Task-instance states asked from inside the triggerer: async, bounded, shared between triggers.

The triggerer's parent process answers every trigger request (GetTaskStates included) on its one
main thread, through an in-process Execution API app. The first request of the parent's life
builds that app and Cadwyn's routers for every API version: 9-10 s of CPU, so seconds on an idle
triggerer and tens of seconds on a loaded one (36 s seen in the field). Meanwhile the
parent serves nothing: no answers, no cancellations, no events ("TriggerRunner subprocess event
loop appears deadlocked", although it is the parent that is busy). The old ``on_kill`` waited for
that answer through ``sync_to_async(RuntimeTaskInstance.get_task_states)`` with no limit of its
own, was cut off by the triggerer's 30 s ``on_kill`` limit and never reached its scancel. (Not a
thread deadlock: ``TriggerCommsDecoder.send`` from a worker thread hands the request to the
runner's loop with ``run_coroutine_threadsafe``; only the unbounded wait was wrong.)

Here: the request goes over the runner's own async channel (``TriggerCommsDecoder.asend``, what
``send`` wraps for threads; private API, in ``slurm_operator.airflow_internals``) under
``asyncio.wait_for``, so a slow answer costs the caller at most its limit and no thread is left
blocked (a late answer is dropped by the runner as "response for unknown request frame"); and
``warm_up`` takes the first, slow answer when a trigger starts, instead of when a user acts on a
task.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_operator import airflow_internals

log = logging.getLogger(__name__)

# TI states that mean the task will not run on in this try: a user marked it (failed, success,
# skipped), or it was removed or never ran. A cleared task is back to none/scheduled/queued/
# restarting and runs again; up_for_retry runs again too.
STOPPED = frozenset({"failed", "success", "skipped", "removed", "upstream_failed"})
STATE_TIMEOUT = 5.0
MAX_STATE_REQUESTS_PER_S = 2.0
"""What shared_task_state lets one triggerer loop ask its parent, all DAGs together."""
_WATCHED_S = 120.0  # a DAG whose waits asked within this long counts as watched

_warm: dict[int, asyncio.Task[Any]] = {}
_by_dag: dict[tuple[int, str], _DagAsks] = {}  # (loop, dag) -> what shared_task_state asks and got
_first_asked: float | None = None  # when this process first asked (the parent's first answer is slow)
_answered = False
# Stops announced inside this triggerer, by (loop, dag, run, task): held only by the waits awaiting them.
_stops: weakref.WeakValueDictionary[tuple[int, str, str, str], asyncio.Event] = weakref.WeakValueDictionary()
_announced: dict[tuple[int, str, str, str], float] = {}  # -> monotonic time of the last announce_stop


async def task_states(
    dag_id: str, run_id: str, task_ids: Sequence[str], limit_s: float = STATE_TIMEOUT
) -> dict[str, str] | None:
    """``{task_id or task_id_mapindex: state}`` ("none" for no state) within ``limit_s``; None if unknown."""
    by_run = await _ask(dag_id, [run_id], task_ids, limit_s)
    return None if by_run is None else by_run.get(run_id, {})


async def _ask(
    dag_id: str, run_ids: Sequence[str], task_ids: Sequence[str], limit_s: float
) -> dict[str, dict[str, str]] | None:
    """One GetTaskStates for ``task_ids`` in ``run_ids``: ``{run: {task: state}}``, None if unknown."""
    comms = airflow_internals.supervisor_comms()
    if comms is None:
        return None
    global _first_asked, _answered
    started = time.monotonic()
    _first_asked = _first_asked or started
    try:
        by_run = await asyncio.wait_for(
            airflow_internals.task_states(comms, dag_id, run_ids, task_ids), limit_s
        )
    except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
        log.warning("the triggerer did not tell the state of %s within %.0f s", list(task_ids), limit_s)
        return None
    except Exception as exc:  # an unknown state must never keep anything alive or crash a trigger
        log.warning("cannot read the state of %s: %s", list(task_ids), exc)
        return None
    if not _answered:
        _answered = True
        log.info(
            "first task-state answer of this triggerer, %.1f s after its first question (the first makes "
            "Airflow build its in-process Execution API, the triggerer serving nothing meanwhile)",
            time.monotonic() - _first_asked,
        )
    if by_run is None:
        return None
    return {
        str(r): {str(k): "none" if v is None else str(v) for k, v in s.items()} for r, s in by_run.items()
    }


async def task_state(
    dag_id: str, run_id: str, task_id: str, map_index: int | None = None, limit_s: float = STATE_TIMEOUT
) -> str | None:
    """One task instance's state ("none" when it has none), None when unknown."""
    states = await task_states(dag_id, run_id, [task_id], limit_s)
    if states is None:
        return None
    key = task_id if map_index is None or map_index < 0 else f"{task_id}_{map_index}"
    return states.get(key, "none")


@dataclass
class _DagAsks:
    """The (run, task) pairs this loop's triggers watch in one DAG, and the last answer for all of them."""

    asked: dict[tuple[str, str], float] = field(default_factory=dict)  # pair -> when last asked for
    covered: frozenset[tuple[str, str]] = frozenset()  # the pairs the last sent request asked
    at: float = 0.0  # when it was sent
    last: float = 0.0  # when a caller last asked
    answer: asyncio.Task[dict[str, dict[str, str]] | None] | None = None  # the last request
    open: asyncio.Task[dict[str, dict[str, str]] | None] | None = None  # one not sent yet: callers join it


async def shared_task_state(
    dag_id: str, run_id: str, task_id: str, max_age: float, limit_s: float = STATE_TIMEOUT
) -> str | None:
    """``task_state`` of an unmapped task: one request per DAG per ``max_age`` s for all callers of this loop.

    Every checkpoint wait of a run watches its training, and a triggerer holds the waits of many runs
    and DAGs: one request per (run, training) and poll was 200 requests a second at the seed's scale,
    more than the triggerer's parent answers (it serves them one at a time on its main thread). One
    request now asks every run and training of the DAG that a wait of this loop watches, and the
    answers may grow staler than ``max_age`` so that the loop sends at most MAX_STATE_REQUESTS_PER_S:
    with the seed's 90 DAGs one request per DAG and half poll (36 a second) still kept the parent at
    28 % of a core with thousands of late answers (docs/performance.md).
    """
    loop = asyncio.get_running_loop()
    now = time.monotonic()
    asks = _by_dag.get((id(loop), dag_id))
    if asks is None or (asks.answer is not None and asks.answer.get_loop() is not loop):
        asks = _by_dag[(id(loop), dag_id)] = _DagAsks()
    pair = (run_id, task_id)
    asks.asked[pair] = asks.last = now
    others = sum(
        1
        for a in _by_dag.values()
        if a is not asks
        and a.answer is not None
        and a.answer.get_loop() is loop
        and now - a.last < _WATCHED_S
    )
    max_age = max(max_age, others / MAX_STATE_REQUESTS_PER_S)
    task = asks.open
    if task is None:
        fresh = asks.answer is not None and now - asks.at <= max_age and pair in asks.covered
        task = asks.answer if fresh else None
    if task is None:
        task = asks.open = asks.answer = loop.create_task(_request_round(asks, dag_id, max_age, limit_s))
    # shield: one caller cancelled (its trigger was) must not cancel the answer the others await.
    by_run = await asyncio.shield(task)
    if by_run is None:
        return None
    return by_run.get(run_id, {}).get(task_id, "none")


def _watched_in(asks: _DagAsks, loop: asyncio.AbstractEventLoop, now: float) -> bool:
    """Whether waits of this loop asked about this DAG lately (then it counts against the rate)."""
    return asks.answer is not None and asks.answer.get_loop() is loop and now - asks.last < _WATCHED_S


async def _request_round(
    asks: _DagAsks, dag_id: str, max_age: float, limit_s: float
) -> dict[str, dict[str, str]] | None:
    await asyncio.sleep(0)  # the callers of this loop turn join this request
    now = time.monotonic()
    for old, last in list(asks.asked.items()):  # pairs nobody asked for in a while: runs that ended
        if now - last > max(600.0, 2 * max_age):
            del asks.asked[old]
    asks.open, asks.at, asks.covered = None, now, frozenset(asks.asked)
    runs = sorted({r for r, _ in asks.covered})
    tasks = sorted({t for _, t in asks.covered})
    return await _ask(dag_id, runs, tasks, limit_s)


def warm_up(dag_id: str, run_id: str, task_id: str) -> None:
    """Ask once per triggerer process, in the background, so that the parent builds its API client now.

    The first answer is the slow one (see the module docstring); taken at start-up, it is not
    taken when a user clears a task and ``on_kill`` has seconds to tell a clear from a stop.
    """
    loop = asyncio.get_running_loop()
    if id(loop) in _warm or airflow_internals.supervisor_comms() is None:
        return
    _warm[id(loop)] = loop.create_task(task_state(dag_id, run_id, task_id, limit_s=300))


def stop_event(dag_id: str, run_id: str, task_id: str) -> asyncio.Event:
    """Set when ``announce_stop`` is called for this task in this triggerer (keep a reference)."""
    key = (id(asyncio.get_running_loop()), dag_id, run_id, task_id)
    event = _stops.get(key)
    if event is None:
        event = _stops[key] = asyncio.Event()
    return event


def announce_stop(dag_id: str, run_id: str, task_id: str) -> None:
    """A trigger of this process saw the task stopped: wake what waits on it now, not at its next poll."""
    key = (id(asyncio.get_running_loop()), dag_id, run_id, task_id)
    _announced[key] = time.monotonic()
    event = _stops.get(key)
    if event is not None:
        event.set()


def stopped_since(dag_id: str, run_id: str, task_id: str, since: float) -> bool:
    """``announce_stop`` was called for this task in this process at or after ``since`` (monotonic):
    an earlier stop (the task was cleared and runs again since) does not count."""
    key = (id(asyncio.get_running_loop()), dag_id, run_id, task_id)
    return _announced.get(key, float("-inf")) >= since
