"""Readiness -> submission per Slurm job: dependency, pool slot, resubmissions (pure arithmetic)."""

from __future__ import annotations

import sys

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import CONVERT_TASK, plan_dag
from tests.fixtures.scripts import REPO

sys.path.append(str(REPO / "scripts" / "lib"))
import dispatch_latency as dl

KEY = ("dag", "pretrain.checkpoints.convert", 0)
OTHER_A = ("dag", "pretrain.train", -1)
OTHER_B = ("dag2", "pretrain.train", -1)
CONVERT = {"conv": dl.Dependency(dl.CHECKPOINT, KEY, "/ckpt", 100, 2.0)}


def test_a_free_slot_makes_the_dependency_the_readiness() -> None:
    spans = [dl.SlotSpan(OTHER_A, 0.0, None), dl.SlotSpan(KEY, 104.0, 200.0)]
    found = dl.latencies([dl.Submission("conv", 109.0, 150.0)], CONVERT, {"conv": 100.0}, spans, slots=2)
    assert [(f.kind, f.ready, f.seconds) for f in found] == [(dl.CHECKPOINT, 100.0, 9.0)]


def test_a_full_pool_makes_the_release_that_let_the_job_in_the_readiness() -> None:
    # Both slots held when the checkpoint was ready at 100; OTHER_B released at 130, the convert got
    # the slot at 131 and submitted at 135: 5 s are the orchestrator's, not 35.
    spans = [
        dl.SlotSpan(OTHER_A, 0.0, None),
        dl.SlotSpan(OTHER_B, 10.0, 130.0),
        dl.SlotSpan(KEY, 131.0, 180.0),
    ]
    found = dl.latencies([dl.Submission("conv", 135.0, 170.0)], CONVERT, {"conv": 100.0}, spans, slots=2)
    assert [(f.ready, f.seconds) for f in found] == [(130.0, 5.0)]
    # With a third slot the pool was not full: the whole wait counts.
    found = dl.latencies([dl.Submission("conv", 135.0, 170.0)], CONVERT, {"conv": 100.0}, spans, slots=3)
    assert [f.seconds for f in found] == [35.0]


def test_a_free_slot_taken_by_a_task_ahead_in_the_queue_is_not_free_for_the_job() -> None:
    # One slot. OTHER_A held it until 41; OTHER_B, ready since 30, got it at 41.2 and held it until 90;
    # the convert, ready at 41, got it at 90.5: its readiness is 90 (B was ahead of it), not 41.
    deps = {**CONVERT, "b": dl.Dependency(dl.CHECKPOINT, OTHER_B, "/ckpt", 20, 0.0)}
    spans = [dl.SlotSpan(OTHER_A, 0.0, 41.0), dl.SlotSpan(OTHER_B, 41.2, 90.0), dl.SlotSpan(KEY, 90.5, 120.0)]
    subs = [dl.Submission("conv", 93.0, None), dl.Submission("b", 43.0, None)]
    found = dl.latencies(subs, deps, {"conv": 41.0, "b": 30.0}, spans, slots=1)
    assert {f.name: (f.ready, f.seconds) for f in found} == {"conv": (90.0, 3.0), "b": (41.0, 2.0)}


def test_a_resubmission_counts_from_the_previous_attempts_end() -> None:
    deps = {"train": dl.Dependency(dl.RUN_START, OTHER_A)}
    subs = [
        dl.Submission("train", 30.0, 90.0),
        dl.Submission("train", 5.0, 20.0),
        dl.Submission("x", 1.0, None),
    ]
    found = dl.latencies(subs, deps, {"train": 0.0}, [dl.SlotSpan(OTHER_A, 1.0, None)], slots=1)
    assert [(f.kind, f.ready, f.submit) for f in found] == [
        (dl.RUN_START, 0.0, 5.0),
        (dl.PREVIOUS_ATTEMPT, 20.0, 30.0),
    ]


def test_an_unknown_dependency_time_measures_only_the_resubmissions() -> None:
    subs = [dl.Submission("conv", 10.0, None)]
    assert dl.latencies(subs, CONVERT, {}, [], slots=1) == []


def test_every_job_of_a_demo_dag_has_its_dependency() -> None:
    plans, settings = load_plans(REPO / "config" / "demo.yaml")
    dag = plan_dag(plans[0], settings)
    deps = dl.dependencies(dag)
    jobs = [p.train.job_name for p in dag.phases]
    jobs += [i["job_name"] for p in dag.phases for i in (p.checkpoints.instances if p.checkpoints else ())]
    assert sorted(deps) == sorted(jobs)  # every Slurm job of the DAG is measured
    pretrain, *cooldowns = dag.phases
    assert deps[pretrain.train.job_name].kind == dl.RUN_START
    group = pretrain.checkpoints
    assert group is not None
    for cooldown in cooldowns:
        branch, wait = deps[cooldown.train.job_name], cooldown.branch_wait
        assert wait is not None
        assert (branch.kind, branch.path, branch.iteration) == (
            dl.CHECKPOINT,
            group.wait.checkpoint_dir,
            wait.iteration,
        )
    for index, instance in enumerate(group.instances):
        dep = deps[instance["job_name"]]
        assert dep.task_key == (dag.experiment.dag_id, f"pretrain.checkpoints.{CONVERT_TASK}", index)
        assert (dep.iteration, dep.settle_seconds) == (instance["iteration"], settings.checkpoint_settle_secs)


def test_the_summary_states_the_targets_per_kind() -> None:
    found = [dl.Latency("a", dl.CHECKPOINT, 0.0, 6.0), dl.Latency("b", dl.RUN_START, 0.0, 20.0)]
    text = dl.summary(found, poll_interval=5.0)
    assert "all: 2 jobs, median 13.0 s (target 7), p95 20.0 s (target 12), max 20.0 s" in text
    assert "checkpoint: 1 jobs, median 6.0 s" in text
    assert dl.summary([], 5.0) == ""
