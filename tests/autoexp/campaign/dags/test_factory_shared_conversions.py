"""`airflow.share_conversion_jobs`: every mapped conversion of a phase submits the same job (name, log,
environment), each still its own task judged by its own checkpoint; off, each its own job. On the
reduced demo (its pretraining saves 2 checkpoints; the setting off, as by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import jinja2
import pytest
from airflow.sdk import DAG
from airflow.sdk.definitions._internal.expandinput import MappedArgument
from airflow.sdk.definitions.taskgroup import MappedTaskGroup
from slurm_operator.operators.slurm import SlurmOperator

from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.dags.factory import build_dags
from tests.e2e.campaign import reduced_config


def _dag(overrides: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DAG:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    return build_dags(reduced_config(tmp_path), overrides)[0]


def _conversions(dag: DAG) -> list[tuple[SlurmOperator, list[dict[str, Any]]]]:
    """Each phase's conversion operator and its group's instances (what every map index gets)."""
    out = []
    for task in dag.tasks:
        if task.task_id.endswith(".checkpoints.convert_eval"):
            group = task.task_group
            assert isinstance(group, MappedTaskGroup)
            assert isinstance(task, SlurmOperator)
            out.append(
                (task, [dict(values) for values in cast("list[dict[str, Any]]", group._expand_input.value)])
            )
    assert len(out) > 1
    return out


def _per_instance(value: Any, instances: list[dict[str, Any]]) -> list[Any]:
    """An operator argument's value in each instance (a mapped argument is looked up in its dict)."""
    if isinstance(value, MappedArgument):
        return [values[value._key] for values in instances]
    if isinstance(value, dict):
        rows = [{k: _per_instance(v, instances)[i] for k, v in value.items()} for i in range(len(instances))]
        return rows
    return [value] * len(instances)


def _labels(task: SlurmOperator, instances: list[dict[str, Any]]) -> list[str]:
    template = jinja2.Environment().from_string(str(task.map_index_template))
    rows = zip(_per_instance(task.environment, instances), instances, strict=True)
    return [
        template.render(ti={"map_index": i}, task={"environment": env}) for i, (env, _) in enumerate(rows)
    ]


def test_on_every_conversion_of_a_phase_submits_one_shared_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = _dag(("airflow.share_conversion_jobs=true",), tmp_path, monkeypatch)
    names = set()
    assert max(len(instances) for _, instances in _conversions(dag)) > 1
    for task, instances in _conversions(dag):
        # The same job name, log pattern and environment (the sbatch command) for every instance.
        for field in ("job_name", "output_path", "environment", "script_path", "submit_lock"):
            values = _per_instance(getattr(task, field), instances)
            assert all(v == values[0] for v in values), (task.task_id, field, values)
        (env,) = {tuple(sorted(e.items())) for e in _per_instance(task.environment, instances)}
        assert [k for k, _ in env] == ["CKPT_SERIES"], env
        assert "-batch-%j.out" in _per_instance(task.output_path, instances)[0]
        names.add(_per_instance(task.job_name, instances)[0])
        # Each instance still waits for, and is judged by, its own checkpoint.
        completions = _per_instance(task.completion_command, instances)
        assert len(set(completions)) == len(instances)
        for instance, completion in zip(instances, completions, strict=True):
            assert f"iter_{instance['iteration']}.done" in completion
        assert _labels(task, instances) == [f"iter {v['iteration']:07d}" + _budget(task) for v in instances]
    assert len(names) == len(_conversions(dag))  # one job name per phase


def test_off_each_checkpoint_is_its_own_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dag = _dag((), tmp_path, monkeypatch)
    for task, instances in _conversions(dag):
        envs = _per_instance(task.environment, instances)
        assert envs == [{"CKPT_ITER": str(v["iteration"])} for v in instances]
        assert len(set(_per_instance(task.job_name, instances))) == len(instances)
        assert len(set(_per_instance(task.output_path, instances))) == len(instances)
        assert _labels(task, instances) == [f"iter {v['iteration']:07d}" + _budget(task) for v in instances]


def _budget(task: SlurmOperator) -> str:
    group_id = str(task.task_group.group_id if task.task_group else "")
    if not group_id.startswith("cooldown_"):
        return ""
    return f" (cooldown {group_id.split('.')[0].removeprefix('cooldown_')})"
