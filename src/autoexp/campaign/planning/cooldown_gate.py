"""The budget gate before an experiment's cooldown fan-out (``airflow.gate.cooldowns``): which
cooldowns wait for it, and what it asks a run.

Pure: no Airflow. The gated cooldowns are those that branch off a pretraining checkpoint (a
cooldown from scratch starts with the run, like the pretraining: the campaign gate covers it). The
approval runs once the first of their branch checkpoints is saved, when a cooldown is about to
start; each gated cooldown's training waits for its answer. It asks by the campaign gate's rule
(``cost_estimate.needs_approval``) on the estimate of the gated cooldowns the run drives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from autoexp.campaign.planning import cost_estimate
from autoexp.campaign.planning.cost_estimate import Estimate, TrainingCost
from autoexp.campaign.planning.plan import ExperimentPlan
from autoexp.campaign.planning.settings import AirflowSettings, GateSettings

# The approval task's id in an experiment DAG.
APPROVE_COOLDOWNS_TASK = "approve_cooldowns"


@dataclass(frozen=True)
class CooldownGatePlan:
    """The cooldown approval of one experiment DAG, decided.

    :param experiment: the experiment's name (the approval's subject names it).
    :param cooldowns: the gated cooldowns' phase keys: the approval runs after the first of their
        branch checkpoint waits succeeds; each one's training waits for it and is skipped on Reject.
    :param trainings: the estimate of each gated cooldown's training (``cost_estimate.training_cost``).
    :param gate: the ``airflow.gate`` settings (threshold, always, throughput, timeout).
    """

    experiment: str
    cooldowns: tuple[str, ...]
    trainings: tuple[TrainingCost, ...]
    gate: GateSettings

    @property
    def timeout_secs(self) -> float:
        """How long the approval waits for an answer; no answer by then is a Reject."""
        return float(self.gate.approval_timeout_secs)

    def estimate(self, phases: Sequence[str]) -> Estimate:
        """The estimate of the gated cooldowns among ``phases`` (a run's ``phases`` Param), and whether
        to ask (never for none of them, even with ``always``)."""
        driven = [t for t in self.trainings if t.phase in phases]
        estimate = cost_estimate.estimate(cost_estimate.of_trainings(driven, self.gate), self.gate)
        return estimate if driven else replace(estimate, approval=False)


def plan_cooldown_gate(plan: ExperimentPlan, settings: AirflowSettings) -> CooldownGatePlan | None:
    """The experiment's cooldown approval; None when ``gate.cooldowns`` is off or no cooldown branches
    off a pretraining checkpoint (the DAG then has no approval task)."""
    gate = settings.gate
    gated = [c for c in plan.cooldowns if not c.from_scratch]
    if not gate.cooldowns or not gated:
        return None
    model, tflops = plan.pretrain.train.params, float(gate.tflops_per_gpu)
    trainings = tuple(
        cost_estimate.training_cost(plan.dag_id, c, settings.keys, tflops, model) for c in gated
    )
    return CooldownGatePlan(plan.name, tuple(c.key for c in gated), trainings, gate)
