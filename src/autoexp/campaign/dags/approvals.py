"""The budget gate's approval tasks: Airflow's human-in-the-loop approval, asked only when an estimate
says so (``cost_estimate.Estimate``); else they succeed at once and nothing waits.

``BudgetApproval`` (the campaign trigger DAG, before a slice starts) reads the select task's estimate;
``CooldownApproval`` (an experiment DAG, before its cooldowns start) makes its own from its plan.
While asking, a task waits in ``awaiting_input`` without a worker slot, the estimate on its Required
Action tab.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator

from autoexp.campaign.planning import task_priority as rank
from autoexp.campaign.planning.cooldown_gate import APPROVE_COOLDOWNS_TASK, CooldownGatePlan
from autoexp.campaign.planning.cost_estimate import Estimate

ESTIMATE_KEY = "estimate"  # the campaign select task's XCom: an Estimate's fields


class EstimateApproval(ApprovalOperator):
    """An approval that asks only when ``estimate_of`` says so; Reject skips its direct downstream tasks.

    :param question: the subject's start, completed by the estimate's total (``Start this slice: 1.6
        GPU-hours?``).
    """

    def __init__(self, *, question: str, **kwargs: Any) -> None:
        super().__init__(subject=f"{question}?", **kwargs)
        self.question = question

    def estimate_of(self, context: Any) -> Estimate | None:
        """This run's estimate; None: nothing to estimate, nothing asked."""
        raise NotImplementedError

    def execute(self, context: Any) -> Any:
        estimate = self.estimate_of(context)
        if estimate is None or not estimate.approval:
            self.log.info("no approval needed:\n%s", "" if estimate is None else estimate.text)
            return None
        head, *rest = estimate.text.splitlines()
        self.subject = f"{self.question}: {estimate.question}?"
        # Markdown: the headline, then one bullet per line (the UI joins plain lines into one).
        self.body = "\n".join([head, "", *(f"- {line.strip()}" for line in rest)])
        return super().execute(context)


class BudgetApproval(EstimateApproval):
    """The campaign trigger DAG's gate, between select and the triggers: asks when the select task's
    estimate says so. Reject skips the triggers; no answer within the timeout fails this task, and
    they never run."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(question="Start this slice", **kwargs)

    def estimate_of(self, context: Any) -> Estimate | None:
        pushed = context["ti"].xcom_pull(task_ids="select", key=ESTIMATE_KEY) or {}
        text, hours = str(pushed.get("text", "")), float(pushed.get("gpu_hours") or 0)
        return Estimate(text, hours, bool(pushed.get("approval"))) if text else None


class CooldownApproval(EstimateApproval):
    """An experiment DAG's gate before its cooldown fan-out: asks when the estimate of the gated
    cooldowns the run drives says so. Reject, or no answer within the timeout (its default answer),
    skips their trainings, and with them their checkpoint waits and conversions; the pretraining and
    its conversions go on.

    :param gate_plan: the gated cooldowns, their estimate and the gate's settings.
    """

    def __init__(self, *, gate_plan: CooldownGatePlan, **kwargs: Any) -> None:
        super().__init__(
            question=f"Start the cooldowns of {gate_plan.experiment}",
            defaults=ApprovalOperator.REJECT,
            **kwargs,
        )
        self.gate_plan = gate_plan

    def estimate_of(self, context: Any) -> Estimate | None:
        return self.gate_plan.estimate(context["params"].get("phases") or [])


def gate_cooldowns(gate: CooldownGatePlan, branch_waits: dict[str, Any], trains: dict[str, Any]) -> Any:
    """The approval before the cooldown fan-out: after the first branch checkpoint, before every gated
    cooldown's training (Reject skips those, its direct downstream tasks; their waits follow)."""
    approve = CooldownApproval(
        task_id=APPROVE_COOLDOWNS_TASK,
        gate_plan=gate,
        response_timeout=timedelta(seconds=gate.timeout_secs),
        # It asks once a cooldown is about to start: the first branch checkpoint the run waits for.
        # A run that drives none of them skips every branch wait, and so this task.
        trigger_rule="one_success",
        priority_weight=rank.BRANCH_WAIT,
    )
    [branch_waits[key] for key in gate.cooldowns] >> approve
    approve >> [trains[key] for key in gate.cooldowns]
    return approve
