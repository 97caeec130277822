"""Everything a DAG's tasks need is decided before Airflow: paths, completion commands, wait budgets."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

from autoexp.campaign.planning import run_layout
from autoexp.campaign.planning.dag_plan import job_name, plan_dag, wait_budget
from autoexp.campaign.planning.plan import plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings
from tests.autoexp.campaign.planning.jobs import campaign

SETTINGS = AirflowSettings()


def test_paths_and_commands_of_one_experiment() -> None:
    plan = plan_campaign(campaign(exps=("a",)), SETTINGS)[0]
    dag = plan_dag(plan, SETTINGS)
    assert dag.remote_dir == "/logs/a/autoexp"
    assert dag.state_dir == "/logs/a/autoexp/state"
    assert dag.scripts["a_PRETRAIN_TRAIN"] == "/logs/a/autoexp/scripts/a_PRETRAIN_TRAIN.sbatch"
    assert dag.copies["a_PRETRAIN_TRAIN"] == ""  # the job's log has no folder
    pretrain, s1, _ = dag.phases
    assert pretrain.branch_wait is None
    assert pretrain.train.completion_command == run_layout.tracker_reached("/logs/a/checkpoints", 10)
    assert pretrain.train.progress_paths == ("/logs/a/checkpoints/latest_checkpointed_iteration.txt",)
    assert pretrain.train.output_path == "/logs/a/slurm-%j.out"
    assert pretrain.checkpoints is not None
    assert [i["iteration"] for i in pretrain.checkpoints.instances] == [4, 8, 10]
    assert pretrain.checkpoints.instances[0]["output_path"] == "/logs/a/slurm-iter4-%j.out"
    # A cooldown waits for pretraining's checkpoint at its branch point, watching pretraining's training.
    assert s1.branch_wait is not None
    assert (s1.branch_wait.phase, s1.branch_wait.watch_phase) == ("cooldown_s1", "pretrain")
    assert (s1.branch_wait.checkpoint_dir, s1.branch_wait.iteration) == ("/logs/a/checkpoints", 4)
    assert dag.report_phases[0]["results"] == "/logs/a/eval_results/iter_{iteration}/results.json"
    assert dag.report_dir == "/logs/a/report"


def test_wait_budget_follows_the_training_time_budget() -> None:
    phase = plan_campaign(campaign(exps=("a",)), SETTINGS)[0].pretrain
    assert wait_budget(phase, SETTINGS) == 7 * 86400.0  # no TIME: unbounded (a week)
    timed = dataclasses.replace(phase, time_limit_secs=600)
    tries = (SETTINGS.retries + 1) * SETTINGS.max_attempts_overall
    assert wait_budget(timed, SETTINGS) == tries * 600 + 3600.0  # every attempt's limit, plus queueing
    assert wait_budget(timed, AirflowSettings(checkpoint_timeout_secs=90.0)) == 90.0


def test_a_termination_cmd_grepping_the_shared_log_is_replaced_by_the_tracker() -> None:
    jobs = campaign(exps=("a",), branches={})
    jobs[0] = dataclasses.replace(
        jobs[0], output_file="/logs/a/t.out", termination_cmd="grep done /logs/a/t.out"
    )
    dag = plan_dag(plan_campaign(jobs, SETTINGS)[0], SETTINGS)
    assert dag.phases[0].train.completion_command == run_layout.tracker_reached("/logs/a/checkpoints", 10)
    assert any("termination_cmd greps /logs/a/t.out" in note for note in dag.notes)


def test_the_planning_side_imports_no_airflow() -> None:
    code = (
        "import pkgutil, importlib, sys, autoexp.campaign.planning as p\n"
        "for m in pkgutil.iter_modules(p.__path__): importlib.import_module(f'{p.__name__}.{m.name}')\n"
        "print(sorted({n.split('.')[0] for n in sys.modules if n.split('.')[0] == 'airflow'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_mapped_instances_are_named_by_checkpoint_and_cooldown_budget() -> None:
    import jinja2

    dag = plan_dag(plan_campaign(campaign(exps=("a",)), SETTINGS)[0], SETTINGS)
    pretrain, s1, _ = dag.phases
    assert pretrain.checkpoints is not None
    assert s1.checkpoints is not None

    def name(label: str, iteration: int) -> str:
        return jinja2.Environment().from_string(label).render(iteration=iteration)

    assert name(pretrain.checkpoints.label, 400) == "iter 0000400"
    assert name(s1.checkpoints.label, 12) == "iter 0000012 (cooldown s1)"


def test_job_names_are_the_same_in_every_run_readable_and_distinct() -> None:
    plans = plan_campaign(campaign(exps=("a", "b")), SETTINGS)
    dag = plan_dag(plans[0], SETTINGS)
    pretrain, s1, _ = dag.phases
    assert dag == plan_dag(plans[0], SETTINGS)  # nothing run-specific: a second run finds the job
    assert re.fullmatch(r"a-pretrain-train-[0-9a-f]{10}", pretrain.train.job_name)
    assert pretrain.checkpoints is not None
    converts = [i["job_name"] for i in pretrain.checkpoints.instances]
    assert re.fullmatch(r"a-pretrain-convert_eval-0000004-[0-9a-f]{10}", converts[0])
    assert len({pretrain.train.job_name, s1.train.job_name, *converts}) == 5
    # Each wait knows the job of the training it watches (to cancel it when that task is stopped).
    assert s1.branch_wait is not None
    assert s1.branch_wait.watch_job_name == pretrain.train.job_name
    assert pretrain.checkpoints.wait.watch_job_name == pretrain.train.job_name
    other = plan_dag(plans[1], SETTINGS).phases[0].train.job_name
    assert other.startswith("b-pretrain-train-")
    assert dag.submit_lock == "/logs/a/autoexp/locks/submit.lock"


def test_a_long_experiment_name_is_shortened_first_and_the_hash_keeps_names_apart() -> None:
    plan = plan_campaign(campaign(exps=("a",)), SETTINGS)[0]
    long = dataclasses.replace(plan, name="x" * 100)
    first = job_name(long, "/r1", "cooldown_s1", "convert_eval", 61036)
    assert len(first) <= 64
    assert re.fullmatch(r"x+-cooldown_s1-convert_eval-0061036-[0-9a-f]{10}", first)
    assert first != job_name(long, "/r2", "cooldown_s1", "convert_eval", 61036)


def test_shared_conversion_jobs_give_a_phase_one_job_name_log_and_series() -> None:
    shared = AirflowSettings(share_conversion_jobs=True)
    plans = plan_campaign(campaign(exps=("a",)), shared)
    dag, own = plan_dag(plans[0], shared), plan_dag(plans[0], SETTINGS)
    pretrain, s1, _ = dag.phases
    assert pretrain.checkpoints is not None
    assert s1.checkpoints is not None
    instances = pretrain.checkpoints.instances
    assert {i["job_name"] for i in instances} == {
        job_name(plans[0], dag.remote_dir, "pretrain", "convert_eval")
    }
    assert {i["output_path"] for i in instances} == {"/logs/a/slurm-batch-%j.out"}
    # Each instance is still judged by its own checkpoint's marker and results.
    assert [i["completion"] for i in instances] == [
        run_layout.marker_exists("/logs/a", it) for it in (4, 8, 10)
    ]
    # START INTERVAL LAST of plan.expected_checkpoints: the same for every instance.
    assert pretrain.checkpoints.shared_environment == {"CKPT_SERIES": "0 4 10"}
    assert s1.checkpoints.shared_environment == {"CKPT_SERIES": "4 4 12"}  # branches at 4, ends at 12
    assert [i["iteration"] for i in s1.checkpoints.instances] == [8, 12]
    # Off (the default): each checkpoint its own job, as before.
    assert own.phases[0].checkpoints is not None
    assert own.phases[0].checkpoints.shared_environment == {}
    assert len({i["job_name"] for i in own.phases[0].checkpoints.instances}) == 3
