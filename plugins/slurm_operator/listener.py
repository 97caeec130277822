"""Cancel the Slurm job of a deferred task that someone sets to failed or success, in any process.

A trigger's ``on_kill`` runs only where a triggerer runs the trigger. After a triggerer crash its
triggers wait to be re-adopted until its heartbeat is stale (``[triggerer]
triggerer_health_check_threshold``, 30 s by default); a task marked failed meanwhile loses its
trigger and nothing cancels the job. Airflow tells listeners of every state its API server sets:
this listener rebuilds the task's trigger from its row and calls ``on_task_stopped`` in a thread of
its own (the request does not wait for SSH). A cancel here and one from a re-adopted trigger's
``on_kill`` are both harmless: scancel of an ended job changes nothing.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
from typing import Any

from airflow.listeners import hookimpl

from slurm_operator.airflow_internals import deferred_trigger
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

log = logging.getLogger(__name__)
# Seconds one cancel may take (connection, scancel, marker) before its thread gives up.
CANCEL_TIMEOUT = 120.0
STOPPED = frozenset({"failed", "success"})


@hookimpl
def on_task_instance_failed(previous_state: Any, task_instance: Any, error: Any) -> None:
    """A task instance failed: cancel its job if it was still deferred on one."""
    stop_deferred_job(task_instance)


@hookimpl
def on_task_instance_success(previous_state: Any, task_instance: Any) -> None:
    """A task instance succeeded (a user marked it so): cancel its job if it was still deferred on one."""
    stop_deferred_job(task_instance)


def stop_deferred_job(ti: Any) -> threading.Thread | None:
    """Start cancelling the job of ``ti``'s Slurm job trigger; the thread doing it, or None."""
    state = str(getattr(ti, "state", "") or "")
    found = deferred_trigger(ti) if state in STOPPED else None
    if found is None:
        return None
    classpath, kwargs = found
    trigger = _trigger(classpath, kwargs)
    if trigger is None:
        return None
    where = f"{ti.dag_id}.{ti.task_id}[{ti.map_index}] of run {ti.run_id}"
    log.info("%s set to %s while deferred on Slurm job %s: cancelling it", where, state, trigger.job_id)
    thread = threading.Thread(
        target=_cancel, args=(trigger, state, where), name=f"slurm-stop-{trigger.job_id}", daemon=True
    )
    thread.start()
    return thread


def _trigger(classpath: str, kwargs: dict[str, Any]) -> SlurmJobTrigger | None:
    """The trigger rebuilt from its row, if it is a Slurm job trigger (any other: None)."""
    module, _, name = classpath.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None  # not ours, or not importable here: its own on_kill is all there is
    if not (isinstance(cls, type) and issubclass(cls, SlurmJobTrigger)):
        return None
    trigger: SlurmJobTrigger = cls(**kwargs)
    return trigger


def _cancel(trigger: SlurmJobTrigger, state: str, where: str) -> None:
    try:
        # wait_for, not asyncio.timeout: the latter is Python 3.11+.
        asyncio.run(asyncio.wait_for(trigger.on_task_stopped(state), CANCEL_TIMEOUT))
    except Exception:
        log.exception("could not cancel Slurm job %s of %s; check it with squeue", trigger.job_id, where)
    else:
        log.info("Slurm job %s of %s cancelled (the task was set to %s)", trigger.job_id, where, state)
