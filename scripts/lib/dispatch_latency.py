"""Readiness -> submission: how long each Slurm job waited on the orchestrator, from a finished campaign.

A job is *ready* at the later of two moments: its dependency is ready (the run started, for a
pretraining's first submission; the checkpoint it starts from or converts is complete and settled;
its previous attempt ended, for a resubmission), and a slot of its pool is free for it (none is
held and none claimed by a task ahead of it in the pool's queue; see ``_slot_ready``). What passes
from then to its sbatch (sacct Submit) is the orchestrator's: trigger polls, task process start-up,
scheduling, the submit itself.

Pure: the caller reads sacct, Airflow's task instances and the checkpoints' file times.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoexp.campaign.planning.dag_plan import CONVERT_TASK, TRAIN_TASK, DagPlan

RUN_START = "run start"
PREVIOUS_ATTEMPT = "previous attempt"
CHECKPOINT = "checkpoint"


@dataclass(frozen=True)
class Dependency:
    """What a job's first submission waits for: ``RUN_START``, or ``CHECKPOINT`` ``iteration`` in ``path``."""

    kind: str
    task_key: tuple[str, str, int]  # (dag_id, task_id, map_index) of the task that submits it
    path: str = ""
    iteration: int = 0
    settle_seconds: float = 0.0


@dataclass(frozen=True)
class Submission:
    """One sacct row: a job's name and its Submit/End epoch seconds (End None while it runs)."""

    name: str
    submit: float
    end: float | None


@dataclass(frozen=True)
class SlotSpan:
    """A pool slot held by one task instance from ``taken`` (queued) to ``freed`` (None: still held)."""

    task_key: tuple[str, str, int]
    taken: float
    freed: float | None


@dataclass(frozen=True)
class Latency:
    name: str
    kind: str
    ready: float
    submit: float

    @property
    def seconds(self) -> float:
        return self.submit - self.ready


def dependencies(dag: DagPlan) -> dict[str, Dependency]:
    """Job name -> what its first submission depends on, for every Slurm job of one DAG."""
    dag_id = dag.experiment.dag_id
    found: dict[str, Dependency] = {}
    for phase in dag.phases:
        train_key = (dag_id, f"{phase.key}.{TRAIN_TASK}", -1)
        branch = phase.branch_wait
        if branch is None:
            found[phase.train.job_name] = Dependency(RUN_START, train_key)
        else:
            iteration = int(branch.iteration or 0)
            found[phase.train.job_name] = Dependency(
                CHECKPOINT, train_key, branch.checkpoint_dir, iteration, branch.settle_seconds
            )
        group = phase.checkpoints
        if group is None:
            continue
        for index, instance in enumerate(group.instances):
            found[str(instance["job_name"])] = Dependency(
                CHECKPOINT,
                (dag_id, f"{phase.key}.checkpoints.{CONVERT_TASK}", index),
                group.wait.checkpoint_dir,
                int(instance["iteration"]),
                group.wait.settle_seconds,
            )
    return found


def _slot_ready(
    own: tuple[str, str, int],
    after: float,
    spans: Sequence[SlotSpan],
    slots: int,
    ready_at: Mapping[tuple[str, str, int], float],
) -> float:
    """When the pool first had a slot for ``own`` from ``after`` on (its dependency's readiness).

    The pool serves in the order it actually granted slots: a slot counts as free for ``own`` at a
    moment when fewer than ``slots`` are held, counting as held also the tasks granted before
    ``own`` that were ready and still waiting then (they were ahead of it in the queue). Looked at
    ``after`` and at every release until ``own`` got its slot.
    """
    mine = [s for s in spans if s.task_key == own and (s.freed is None or s.freed > after)]
    taken = min((s.taken for s in mine), default=None)
    if taken is None or taken <= after:
        return after
    ahead = [s for s in spans if s.task_key != own and s.taken < taken]
    moments = sorted({after, *(s.freed for s in spans if s.freed is not None and after < s.freed <= taken)})
    for t in moments:
        held = sum(1 for s in ahead if s.taken <= t and (s.freed is None or s.freed > t))
        waiting = sum(1 for s in ahead if s.taken > t and ready_at.get(s.task_key, float("inf")) <= t)
        if held + waiting < slots:
            return t
    return moments[-1]


def latencies(
    submissions: Iterable[Submission],
    deps: Mapping[str, Dependency],
    dependency_ready: Mapping[str, float],
    spans: Sequence[SlotSpan],
    slots: int,
) -> list[Latency]:
    """One Latency per submission of a job in ``deps`` whose dependency time is known.

    ``dependency_ready``: job name -> when its first submission's dependency was ready (the run's
    start, or the checkpoint's last file write plus its settle time).
    """
    by_name: dict[str, list[Submission]] = {}
    for sub in submissions:
        if sub.name in deps:
            by_name.setdefault(sub.name, []).append(sub)
    ready_at = {
        dep.task_key: dependency_ready[name] for name, dep in deps.items() if name in dependency_ready
    }
    found: list[Latency] = []
    for name, subs in by_name.items():
        subs.sort(key=lambda s: s.submit)
        dep = deps[name]
        if name in dependency_ready:
            ready = _slot_ready(dep.task_key, dependency_ready[name], spans, slots, ready_at)
            found.append(Latency(name, dep.kind, ready, subs[0].submit))
        for before, sub in itertools.pairwise(subs):
            if before.end is not None:  # the task holds its slot across its own resubmissions
                found.append(Latency(name, PREVIOUS_ATTEMPT, before.end, sub.submit))
    return found


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(found: Sequence[Latency], poll_interval: float) -> str:
    """One line per dependency kind and one for all: count, median, p95, max, against the targets
    (median <= poll + 2 s, p95 <= 2 x poll + 2 s)."""
    lines = []
    groups = {"all": list(found)}
    for item in found:
        groups.setdefault(item.kind, []).append(item)
    for kind, items in groups.items():
        if not items:
            continue
        seconds = [i.seconds for i in items]
        median, p95 = statistics.median(seconds), percentile(seconds, 0.95)
        lines.append(
            f"{kind}: {len(items)} jobs, median {median:.1f} s (target {poll_interval + 2:.0f}), "
            f"p95 {p95:.1f} s (target {2 * poll_interval + 2:.0f}), max {max(seconds):.1f} s"
        )
    return "\n".join(lines)
