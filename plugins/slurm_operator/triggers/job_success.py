"""A completed job's success, decided in the triggerer: no task process resumes to judge it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from airflow.triggers.base import TaskSuccessEvent

from slurm_operator import airflow_internals
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model.ledger import Ledger, Verdict
from slurm_operator.model.records import JobRecord
from slurm_operator.policy import completion


class EndingTrigger(Protocol):
    """What of a SlurmJobTrigger the success needs."""

    job_id: str
    log_path: str | None
    carry: dict[str, Any]
    completion_regex: str | None
    completion_command: str | None
    task_instance: Any

    @property
    def log(self) -> Any: ...

    async def on_success(self, hook: AsyncSlurmHook) -> None: ...


async def end_task_here(
    trigger: EndingTrigger, hook: AsyncSlurmHook, record: JobRecord, offset: int
) -> TaskSuccessEvent | None:
    """The task's success, when the completed job's completion checks pass; else None (the
    operator judges, as without ``end_task_on_success``). Before Airflow 3.3 a trigger cannot write
    the task's XCom: the operator judges there."""
    if not airflow_internals.TRIGGER_XCOMS:
        return None
    try:
        rule = completion.CompletionRule(regex=trigger.completion_regex, command=trigger.completion_command)
        if not await completion.check_async(hook, rule, trigger.log_path):
            return None  # not done, or no check configured: the operator judges
        ledger = Ledger.from_dict(trigger.carry)
        ended = ledger.current.ended(record)
        ledger.update_current(replace(ended, completion_ok=True, verdict=Verdict.SUCCEED))
        ledger.log_offset = offset
        await trigger.on_success(hook)
        # The task's XCom, as its operator would return it, written here: Airflow 3.3.2 stores a
        # TaskSuccessEvent's ``xcoms`` as JSON text (xcom_pull then returns a str).
        ti = trigger.task_instance
        await airflow_internals.xcom_set(
            ledger.results(),
            key="return_value",
            dag_id=str(ti.dag_id),
            task_id=str(ti.task_id),
            run_id=str(ti.run_id),
            map_index=int(ti.map_index),
        )
    except Exception as exc:  # in doubt the operator judges: it reads and checks all of it again
        trigger.log.warning("Slurm job %s: the task process judges its end (%s)", trigger.job_id, exc)
        return None
    attempt = ledger.current.attempt
    trigger.log.info(
        "Slurm job %s (attempt %d): completed, completion check passed -> succeed", trigger.job_id, attempt
    )
    return TaskSuccessEvent()
