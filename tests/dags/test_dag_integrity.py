"""The DAG file imports every listed config with the expected DAGs, tasks, mapping and settings; no DB."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from autoexp.campaign.planning.training_log import ITERATION_PROGRESS
from autoexp.config.builtins import tools_hash
from tests.airflow_versions import dag_bag

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DEMO = REPO / "config" / "demo.yaml"
SEED = REPO / "config" / "scaling_exps.yaml"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean checkout: nothing set but the config list (the DAG file derives the rest)."""
    for name in ("AUTOEXP_ROOT", "AUTOEXP_DEMO_DIR"):
        monkeypatch.delenv(name, raising=False)


def bag(configs: list[Path], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AUTOEXP_CONFIGS", os.pathsep.join(map(str, configs)))
    return dag_bag(DAGS)


def test_demo_config_gives_one_dag_per_experiment(monkeypatch: pytest.MonkeyPatch) -> None:
    dagbag = bag([DEMO], monkeypatch)
    assert dagbag.import_errors == {}
    # One DAG per experiment, and the campaign's trigger DAG.
    assert sorted(dagbag.dags) == [
        "autoexp_campaign_demo",
        "autoexp_campaign_report_demo",
        *(
            f"demo_demo_{m}_lr{lr}_bs4"
            for m in ("medium", "small", "tiny")
            for lr in ("0.002", "0.006", "0.018")
        ),
    ]
    dag = dagbag.dags["demo_demo_tiny_lr0.002_bs4"]
    assert dag.tags == {"autoexp", "demo"}
    assert dag.default_args["retries"] == 1
    assert dag.default_args["owner"] == "autoexp-demo"
    assert dag.default_args["on_failure_callback"] is not None
    assert set(dag.params.keys()) == {"phases", "dry_run", "max_attempts"}
    assert dag.params["phases"] == ["pretrain", "cooldown_16K", "cooldown_24K"]
    assert sorted(dag.task_dict) == sorted(
        [
            "stage",
            "report",
            "pretrain.train",
            "pretrain.arm_waits",
            "pretrain.checkpoints.wait",
            "pretrain.checkpoints.convert_eval",
            *[
                f"cooldown_{b}.{t}"
                for b in ("16K", "24K")
                for t in (
                    "wait_branch_checkpoint",
                    "train",
                    "arm_waits",
                    "checkpoints.wait",
                    "checkpoints.convert_eval",
                )
            ],
        ]
    )
    train = dag.task_dict["pretrain.train"]
    assert train.pool == "slurm_local"
    assert train.retries == 1
    assert train.completion_regex == "after training is done"
    assert "latest_checkpointed_iteration.txt" in train.completion_command
    # No env set: the run folder defaults under the checkout's .state/ (through {CONFIG_DIR}/..).
    run_dir = f"{REPO}/config/../.state/demo/campaign/runs/demo_tiny_lr0.002_bs4"
    assert train.output_path == f"{run_dir}/slurm_train-%j.out"
    assert train.start_condition == ""
    # Hang detection: the log and the checkpoint tracker are watched, with the campaign's defaults.
    assert (train.progress_timeout, train.startup_timeout, train.unknown_timeout) == (3600, 7200, 1800)
    assert train.progress_paths == [f"{run_dir}/checkpoints/latest_checkpointed_iteration.txt"]
    # A log that grows while the reported iteration does not rise (a restart loop) is no progress.
    assert train.progress_pattern == ITERATION_PROGRESS
    convert = dag.task_dict["pretrain.checkpoints.convert_eval"]
    assert (convert.progress_timeout, convert.unknown_timeout) == (None, 1800)
    cooldown = dag.task_dict["cooldown_24K.train"]
    tools = f"{REPO}/config/../.state/demo/campaign/tools/{tools_hash()}"  # staged by the DAG's stage task
    assert cooldown.start_condition.startswith(f"{tools}/helpers/cooldown_helper.sh ")
    assert cooldown.upstream_task_ids == {"cooldown_24K.wait_branch_checkpoint", "stage"}
    # Clearing a training (with its downstream tasks, the UI's default) re-arms every wait that
    # watches it: each is downstream of it and runs beside it ("always"), the mapped ones through
    # arm_waits (Airflow refuses "always" inside a mapped group).
    assert dag.task_dict["pretrain.train"].downstream_task_ids == {
        "pretrain.arm_waits",
        "cooldown_16K.wait_branch_checkpoint",
        "cooldown_24K.wait_branch_checkpoint",
        "report",
    }
    assert dag.task_dict["cooldown_24K.train"].downstream_task_ids == {"cooldown_24K.arm_waits", "report"}
    assert dag.task_dict["cooldown_24K.arm_waits"].downstream_task_ids == {"cooldown_24K.checkpoints.wait"}
    for task_id in ("pretrain.arm_waits", "cooldown_24K.arm_waits", "cooldown_24K.wait_branch_checkpoint"):
        assert dag.task_dict[task_id].trigger_rule == "always", task_id
    assert dag.task_dict["pretrain.checkpoints.wait"].upstream_task_ids == {"pretrain.arm_waits"}
    wait = dag.task_dict["cooldown_24K.wait_branch_checkpoint"]
    assert wait.iteration == 48  # both cooldowns branch from pretraining's last checkpoint
    assert wait.checkpoint_dir == f"{run_dir}/checkpoints"
    # The branch wait watches pretraining's outcome and gives up after pretraining's time budget:
    # (retries 1 + 1) x max_attempts_overall 100 x TIME 15 min + 1 h of queueing.
    assert wait.watch_phase == "pretrain"
    assert wait.timeout_secs == 2 * 100 * 900 + 3600
    assert dag.task_dict["pretrain.checkpoints.wait"].watch_phase == "pretrain"
    # A cooldown's checkpoint waits start with the run: pretraining's budget comes on top of theirs.
    cooldown_waits = dag.task_dict["cooldown_24K.checkpoints.wait"]
    assert cooldown_waits.timeout_secs == 2 * wait.timeout_secs  # pretraining's and the cooldown's
    assert dag.task_dict["cooldown_16K.checkpoints.wait"].watch_phase == "cooldown_16K"
    assert dag.task_dict["stage"].upstream_task_ids == set()
    # One mapped instance per expected checkpoint: pretraining saves at 48 (SAVE_INTERVAL, its last).
    group = dag.task_group_dict["pretrain.checkpoints"]
    iterations = [kw["iteration"] for kw in group._expand_input.value]
    assert iterations == [48]
    # Every wait is started and ended by the triggerer, no task process (docs/performance.md): the
    # scheduler builds its trigger from these arguments; a mapped one picks its iteration by map index.
    mapped_wait = dag.task_dict["pretrain.checkpoints.wait"]
    assert mapped_wait.start_from_trigger
    assert mapped_wait.start_trigger_args.trigger_kwargs["iterations"] == [48]
    kwargs = wait.start_trigger_args.trigger_kwargs
    assert (kwargs["iteration"], kwargs["iterations"], kwargs["end_task"]) == (48, [], True)
    assert (kwargs["phase"], kwargs["watch_phase"]) == ("cooldown_24K", "pretrain")
    assert wait.start_trigger_args.timeout.total_seconds() == wait.timeout_secs
    assert [
        kw["iteration"] for kw in dag.task_group_dict["cooldown_16K.checkpoints"]._expand_input.value
    ] == [64]
    report = dag.task_dict["report"]
    assert report.trigger_rule == "none_failed"
    assert [a.name for a in report.outlets] == ["autoexp.demo_demo_tiny_lr0.002_bs4.eval_results"]
    assert "sha256" in (dag.doc_md or "")
    assert "- **Learning rate**: peak 0.002," in (dag.doc_md or "")


def test_campaign_report_dag_refreshes_on_any_experiment_report(monkeypatch: pytest.MonkeyPatch) -> None:
    dagbag = bag([DEMO], monkeypatch)
    dag = dagbag.dags["autoexp_campaign_report_demo"]
    experiments = [d for d in dagbag.dags.values() if not d.dag_id.startswith("autoexp_campaign_")]
    outlets = {a.name for d in experiments for a in d.task_dict["report"].outlets}
    assert {a.name for a in dag.timetable.asset_condition.objects} == outlets  # type: ignore[attr-defined]
    assert len(outlets) == 9
    assert type(dag.timetable.asset_condition).__name__ == "AssetAny"  # type: ignore[attr-defined]
    assert dag.tags == {"autoexp", "demo", "campaign-report"}
    assert list(dag.task_dict) == ["campaign_report"]
    args = dag.task_dict["campaign_report"].report_args
    assert (args["stem"], args["ssh_conn_id"], args["since"]) == ("demo", "slurm_local", "2024-01-01")
    assert sorted(s["dag_id"] for s in args["specs"]) == sorted(d.dag_id for d in experiments)
    assert dag.params["budgets"] == []


def test_broken_config_is_an_import_error_and_spares_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "broken.yaml"
    text = DEMO.read_text()
    broken.write_text(text.replace("  retries: 1\n", "  retries: many\n"))
    line = text.splitlines().index("  retries: 1") + 1
    dagbag = bag([broken, DEMO], monkeypatch)
    assert len(dagbag.dags) == 9 + 2  # the demo's experiments, its trigger DAG and its campaign report
    assert list(dagbag.import_errors.values()) == [
        f"CampaignConfigError: {broken}:{line}: airflow.retries: expected int, got 'many'"
    ]


def test_bad_branch_iteration_names_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = DEMO.read_text()
    formula = next(line for line in text.splitlines() if line.strip().startswith("ITER:"))
    broken = tmp_path / "odd.yaml"
    broken.write_text(text.replace(formula, "      ITER: 25"))
    line = text.splitlines().index(formula) + 1
    dagbag = bag([broken], monkeypatch)
    assert dagbag.dags == {}
    assert list(dagbag.import_errors.values()) == [
        f"CampaignConfigError: {broken}:{line}: ITER: cooldown CD_SCALE=16K branches at iteration 25, "
        "which is not a multiple of SAVE_INTERVAL=48: no checkpoint will exist there "
        "(job demo_tiny_lr0.002_bs4_COOLDOWN16K_TRAIN)"
    ]


def test_seed_config_gives_90_dags_of_12_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    dagbag = bag([SEED], monkeypatch)
    assert dagbag.import_errors == {}
    assert len(dagbag.dags) == 90 + 2  # the experiments, the campaign's trigger DAG and its report
    budgets = ["100M", "200M", "400M", "1B", "2B"]
    dag = dagbag.dags["c4_10M_lr0.01_b1_0.9_b2_0.95_wd0.01_w585_n1_bs4__withBias"]
    # No airflow: section: the defaults.
    assert dag.tags == {"autoexp"}
    assert dag.default_args["retries"] == 2
    assert dag.default_args["owner"] == "autoexp"
    assert sorted(dag.task_dict) == sorted(
        [
            "stage",
            "report",
            "pretrain.train",
            "pretrain.arm_waits",
            "pretrain.checkpoints.wait",
            "pretrain.checkpoints.convert_eval",
            *[
                f"cooldown_{b}.{t}"
                for b in budgets
                for t in (
                    "wait_branch_checkpoint",
                    "train",
                    "arm_waits",
                    "checkpoints.wait",
                    "checkpoints.convert_eval",
                )
            ],
        ]
    )
    mapped = {k: g for k, g in dag.task_group_dict.items() if k.endswith(".checkpoints")}
    assert sorted(mapped) == sorted(["pretrain.checkpoints", *[f"cooldown_{b}.checkpoints" for b in budgets]])
    # 61036 iterations saved every 2000: 30 saves and the last one, each converted and evaluated.
    pretrain = [kw["iteration"] for kw in mapped["pretrain.checkpoints"]._expand_input.value]
    assert (len(pretrain), pretrain[0], pretrain[-1]) == (31, 2000, 61036)
    assert dag.task_dict["pretrain.train"].pool == "slurm_slurm_default"
    # bs16 and bs32 runs are too short for the small budgets: ITER=0, those cooldowns train from scratch
    # (5 cells: 2 budgets at bs16, 3 at bs32), with no branch wait and a note on the DAG page.
    for bs, scratch in (("4", 0), ("16", 2), ("32", 3)):
        dags = [d for d in dagbag.dags.values() if d.dag_id.endswith(f"_bs{bs}__withBias")]
        assert len(dags) == 15
        for d in dags:
            waits = [t for t in d.task_dict if t.endswith("wait_branch_checkpoint")]
            assert len(waits) == 5 - scratch, d.dag_id
            assert (d.doc_md or "").count("trains from scratch") == scratch, d.dag_id


def test_trigger_form_and_mapped_names_say_what_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """Phases are a multi-select with named choices; each mapped instance is named by its checkpoint."""
    import copy
    from types import SimpleNamespace

    dag = bag([DEMO], monkeypatch).dags["demo_demo_tiny_lr0.002_bs4"]
    phases = dag.params.get_param("phases").schema
    # Airflow's form draws a multi-select for an array with ``examples`` (``items.enum`` alone: free text).
    assert phases["examples"] == ["pretrain", "cooldown_16K", "cooldown_24K"]
    assert phases["items"]["enum"] == phases["examples"]
    assert phases["values_display"]["cooldown_16K"] == "cooldown 16K, from pretraining iter 48"
    assert phases["title"] == "Phases to run"
    names = {}
    for task_id, count in (("pretrain.checkpoints.wait", 1), ("pretrain.checkpoints.convert_eval", 1),
                           ("cooldown_16K.checkpoints.convert_eval", 1)):  # fmt: skip
        for map_index in range(count):
            # What the task runner does per instance: render the fields, then map_index_template.
            task = copy.copy(dag.task_dict[task_id])
            context = {"ti": SimpleNamespace(map_index=map_index, task=task), "task": task}
            task.render_template_fields(context, dag.get_template_env())  # type: ignore[arg-type]
            template = dag.get_template_env().from_string(task.map_index_template or "")
            names[f"{task_id}/{map_index}"] = template.render(context)
    assert names == {
        "pretrain.checkpoints.wait/0": "iter 0000048",
        "pretrain.checkpoints.convert_eval/0": "iter 0000048",
        "cooldown_16K.checkpoints.convert_eval/0": "iter 0000064 (cooldown 16K)",
    }
