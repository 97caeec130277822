"""What a campaign slice will cost before it starts: GPU-hours of its trainings from 6·N·D FLOPs.

Pure: no Airflow. The campaign trigger DAG's select task estimates the slice it selected, logs the
text, and its approval task asks for a human answer when ``needs_approval`` says so; an experiment
DAG's cooldown approval does the same for its cooldowns (``cooldown_gate``).

Per training (one phase of one experiment): N is the model's parameter count (model_size.py), D the
tokens the run itself trains, ``(TRAIN_ITERS - start iteration) x tokens per iteration``: the
pretraining's budget rounded up to whole iterations, and for a cooldown branch only the part after
the pretraining checkpoint it resumes from (its budget variable counts from iteration 0). FLOPs /
the assumed throughput per GPU gives GPU-hours; divided by the job's GPUs (nodes x GPUs per node),
its wall-clock hours. Conversions are counted, not costed: their cost is per checkpoint, minutes each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoexp.campaign.planning.campaign_slice import Selected
from autoexp.campaign.planning.model_size import param_count
from autoexp.campaign.planning.plan import ExperimentPlan, PhasePlan
from autoexp.campaign.planning.settings import GateSettings, Keys

TERA = 1e12
HOUR = 3600.0


@dataclass(frozen=True)
class TrainingCost:
    """One training of the slice.

    :param dag_id: the experiment's DAG.
    :param phase: the phase key (``pretrain``, ``cooldown_<branch>``).
    :param params: N, the model's parameter count; None when the shape is unknown.
    :param tokens: D, the tokens this run trains; None without SEQ_LENGTH and GLOBAL_BATCH_SIZE.
    :param gpus: the job's GPUs, nodes x GPUs per node (1 each when the variable is not set).
    :param gpu_hours: 6·N·D / throughput / 3600; None when N or D is unknown.
    :param conversions: the conversion jobs of its checkpoints (counted, not costed).
    """

    dag_id: str
    phase: str
    params: int | None
    tokens: int | None
    gpus: int
    gpu_hours: float | None
    conversions: int = 0

    @property
    def wall_hours(self) -> float | None:
        """Hours the job runs on its GPUs at the assumed throughput."""
        return None if self.gpu_hours is None else self.gpu_hours / self.gpus


@dataclass(frozen=True)
class SliceCost:
    """The estimate of one slice: its trainings, its conversion jobs, the throughput assumed."""

    trainings: tuple[TrainingCost, ...]
    conversions: int
    tflops_per_gpu: float

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the trainings that could be estimated."""
        return sum(t.gpu_hours for t in self.trainings if t.gpu_hours is not None)

    @property
    def unknown(self) -> tuple[TrainingCost, ...]:
        """Trainings without an estimate (unknown model shape or tokens per iteration)."""
        return tuple(t for t in self.trainings if t.gpu_hours is None)


def _count(params: Mapping[str, Any], model: Mapping[str, Any], var: str) -> int:
    """A job's count variable (nodes, GPUs per node), else the pretraining's; 1 when neither says."""
    value = params.get(var)
    value = model.get(var) if value is None else value
    if isinstance(value, bool) or not isinstance(value, int | str):
        return 1
    try:
        return max(1, int(value))
    except ValueError:
        return 1


def training_cost(
    dag_id: str, phase: PhasePlan, keys: Keys, tflops_per_gpu: float, model: Mapping[str, Any] | None = None
) -> TrainingCost:
    """The estimate of one phase's training; ``model``: the pretraining's variables, the model's shape
    when the phase's job leaves it out (the pretraining's TRAIN job holds every variable)."""
    params, model = phase.train.params, model or {}
    n = param_count(params) or param_count(model)
    d = (
        None
        if phase.tokens_per_iter is None
        else (phase.train_iters - phase.start_iter) * phase.tokens_per_iter
    )
    gpus = _count(params, model, keys.nodes) * _count(params, model, keys.gpus_per_node)
    hours = None if n is None or d is None else 6 * n * d / (tflops_per_gpu * TERA) / HOUR
    conversions = len(phase.checkpoints) if phase.convert is not None else 0
    return TrainingCost(dag_id, phase.key, n, d, gpus, hours, conversions)


def slice_cost(
    plans: Sequence[ExperimentPlan], selected: Sequence[Selected], keys: Keys, gate: GateSettings
) -> SliceCost:
    """The estimate of the selected phases of the selected experiments."""
    by_id = {p.dag_id: p for p in plans}
    trainings = []
    for chosen in selected:
        phases = {p.key: p for p in by_id[chosen.dag_id].phases}
        for key in chosen.phases:
            model = by_id[chosen.dag_id].pretrain.train.params
            trainings.append(
                training_cost(chosen.dag_id, phases[key], keys, float(gate.tflops_per_gpu), model)
            )
    return of_trainings(trainings, gate)


def of_trainings(trainings: Sequence[TrainingCost], gate: GateSettings) -> SliceCost:
    """The estimate of these trainings together."""
    return SliceCost(tuple(trainings), sum(t.conversions for t in trainings), float(gate.tflops_per_gpu))


def needs_approval(cost: SliceCost, gate: GateSettings) -> bool:
    """Ask a human when the gate says always, or the estimate (or an unknown part) passes the threshold."""
    if gate.always:
        return True
    threshold = float(gate.gpu_hours_threshold)
    return threshold > 0 and (cost.gpu_hours > threshold or bool(cost.unknown))


@dataclass(frozen=True)
class Estimate:
    """What an approval task reads: the text (``describe``), the GPU-hours, whether to ask."""

    text: str
    gpu_hours: float
    approval: bool

    @property
    def question(self) -> str:
        """The headline's total, for an approval's subject: ``1.6 GPU-hours``."""
        return self.text.splitlines()[0].removeprefix("estimate: ").split(" for ")[0]


def estimate(cost: SliceCost, gate: GateSettings) -> Estimate:
    """The estimate in words, its total and the gate's verdict."""
    return Estimate(describe(cost, gate), cost.gpu_hours, needs_approval(cost, gate))


def _hours(value: float) -> str:
    """1,234.5 as such; a toy campaign's 6e-09 not as 0.0."""
    return f"{value:,.1f}" if value >= 0.1 or value == 0 else f"{value:.2g}"


def describe(cost: SliceCost, gate: GateSettings) -> str:
    """The estimate in words: a headline, then the largest trainings (the task log, the approval's body)."""
    wall = [t.wall_hours for t in cost.trainings if t.wall_hours is not None]
    head = (
        f"estimate: {_hours(cost.gpu_hours)} GPU-hours for {len(cost.trainings)} training(s) "
        f"(6·N·D FLOPs at {cost.tflops_per_gpu:g} TFLOP/s per GPU)"
    )
    lines = [head]
    if wall:
        lines.append(f"  longest training: {_hours(max(wall))} h on its GPUs")
    if cost.unknown:
        lines.append(f"  {len(cost.unknown)} training(s) not estimated (model shape or tokens unknown)")
    lines.append(f"  {cost.conversions} conversion job(s), one per checkpoint, not costed")
    if gate.always:
        lines.append("  approval: always asked (airflow.gate.always)")
    elif gate.gpu_hours_threshold > 0:
        verdict = "needed" if needs_approval(cost, gate) else "not needed"
        lines.append(
            f"  approval: {verdict} (airflow.gate.gpu_hours_threshold: {gate.gpu_hours_threshold:g})"
        )
    top = sorted((t for t in cost.trainings if t.gpu_hours is not None), key=lambda t: -(t.gpu_hours or 0))
    for t in top[:5]:
        lines.append(
            f"  {t.dag_id} {t.phase}: N={t.params:,} D={t.tokens:,} on {t.gpus} GPU(s): "
            f"{_hours(t.gpu_hours or 0)} GPU-h"
        )
    return "\n".join(lines)
