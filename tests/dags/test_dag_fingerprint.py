"""config/scaling_exps.yaml's DAGs keep their exact structure: a fingerprint pinned before the parse-time
optimisations."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, Asset
from airflow.sdk.definitions._internal.expandinput import MappedArgument
from airflow.sdk.definitions.taskgroup import MappedTaskGroup, TaskGroup

from autoexp.campaign.dags.factory import build_dags
from autoexp.config.builtins import tools_hash
from tests.airflow_versions import AIRFLOW_VERSION, DagSerialization

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "config" / "scaling_exps.yaml"
# Fingerprints of the factory's output for config/scaling_exps.yaml, taken before the parse-time cuts
# of issue 6 (built the slow way: @task_group decorator, one >> per phase). A change of that config
# or of the DAG shape changes them on purpose: then check the diff of `summary()` and re-pin.
# Re-pinned for issue 11 (hang detection): the Slurm tasks gained the template field
# `progress_paths` (the training's checkpoint tracker; [] for conversions) and the pinned attributes
# unknown_timeout/progress_timeout/startup_timeout; the diff against the old pins was exactly that.
# Re-pinned for issue 13 (planning/Airflow split): the serialized diff was exactly the operators' module
# path (`_task_module` autoexp.experiment.operators -> autoexp.campaign.tasks.operators); the summary's
# was that path in "class" plus stage_args' new `expected_env` ({}: this config reads no ${oc.env:...}).
# Re-pinned for issue 14: (a) one alert per failed run: each task's failure callback (and default_args'
# on_failure_callback) CampaignNotifier -> FailureRecorder in the summary, the DAG's new
# `"has_on_failure_callback": true` in the serialized form; (b) a UI that says what it shows: doc_md in
# plain words instead of the variables table, each mapped wait and convert_eval task's
# `map_index_template` ("iter 0000400", "+ (cooldown 2B)" in cooldowns), and the Params' schemas
# (titles, reworded descriptions, `examples` and `values_display` for `phases`). Each part was checked
# alone on its branch; the merged pins below are (a) + (b) + (c).
# (c) Re-pinned for issue 14 (job identity across runs): the diff against the old pins was exactly the Slurm
# tasks' `job_name` (None -> `<experiment>-<phase>-train-<hash>` for trainings, `<mapped job_name>` for
# conversions, whose expand input gained a `job_name` key per checkpoint) and the new template field
# `submit_lock` (`<remote_dir>/locks/submit.lock`); schedule and catchup are unchanged (None, False).
# Re-pinned for issue 15 (conversion resources and site settings as YAML keys in the seed config): the
# diff against the old pins was exactly the config's hash (stage_args' expected_hash and doc_md).
# Re-pinned again for issue 15 (tools shipped by stage): the diff was exactly the cooldowns' start_condition
# (helpers under {LOGS}/.autoexp/tools/<tools-hash>/ instead of a hand-copied include/), stage_args without
# `helpers_dir`, and the config's hash.
# Re-pinned for the report of a sweep (report_args gain each phase's `train_output` pattern).
# Re-pinned for issue 17 (absolute task ranks, planning/task_priority.py): the diff against the old pins
# was exactly each task's `priority_weight` and `weight_rule: absolute`, and default_args' weight_rule.
# Re-pinned for issue 17 (waits started by the scheduler): the waits' start_from_trigger and
# start_trigger_args (the serialized form only; the summary does not pin them).
# Re-pinned for issue 17 (serialized size): the diff against the old pins was exactly the mapped template
# fields (iteration, job_name, output_path, completion_command, environment's CKPT_ITER), stored as
# "<mapped key>" instead of the whole expand input's text truncated at 4 KB (267 -> 171 KB for the two).
# Re-pinned for issue 26 (clearing a training re-arms its waits): the summary's diff against the old
# pins was exactly one `arm_waits` EmptyOperator per phase (trigger rule always, between the training
# and its mapped waits), each branch wait's trigger rule always and upstream pretrain.train instead
# of stage, each cooldown training's upstream + stage, and the cooldowns' mapped waits' timeout_secs
# (+ pretraining's budget: they start with the run).
# Re-pinned for issue 28 (progress is not failure): a try may now submit up to max_attempts_overall
# (100) jobs, since time limits after progress do not count toward max_attempts, and the waits' derived
# budget follows it; the diff against the old pins was exactly the waits' `timeout_secs` in the summary
# and their start_trigger_args' `timeout` in the serialized form. The trainings' new arguments
# (fatal_patterns, max_attempts_overall) are neither template fields nor in _ATTRS: not pinned.
# Re-pinned for issue 27 (renovation: folders regrouped): with every moved module's new path mapped back
# to its old one in the JSON text, both digests were exactly the previous pins (2490e04c..., 4fd1938e...).
# Re-pinned for issue 27 (no private Airflow API in the factory): the mapped groups are built by the
# public @task_group + expand_kwargs again (the summary is unchanged); the serialized diff was exactly
# the 5 mapped template fields of each mapped group (the wait's iteration, the conversion's CKPT_ITER,
# completion_command, output_path, job_name: 60 values in the two DAGs), now the
# text of Airflow's own MappedArgument over a short list ("MappedArgument(_input=ListOfDictsExpandInput(
# value=<31 instances>), _key='job_name')") instead of "<mapped job_name>": 150.6 -> 154.7 KB for the two.
# Re-pinned for issue 27 (one reading of the tracker, a49c697): the summary's diff against the move's
# (2229658) was exactly the trainings' completion_command (12 of 12 in the first two DAGs), which now
# trims the tracker's surrounding whitespace as Megatron's reader does before comparing it.
# Re-pinned for issue 27 (installs beside Airflow 3.1-3.3): the summary names an asset by the fields the
# factory sets instead of Airflow's repr, which gains fields per release; the diff against the old pin
# was exactly that in the 90 outlets (3.3's repr ended `, watchers=[], access_control=...)`, 3.1's
# `, watchers=[])`); the same summary digest on 3.1.8, 3.2.2 and 3.3.2.
SUMMARY_SHA = "9a6b618adb2994b81bb98237c12181ce04e662705d9d1285544c4783a35c8516"
# The serialized form is Airflow's own format, which each minor release extends: one pin per minor,
# taken from the same DAGs (the summary above agrees on all three). Against 3.3.2's, 3.2.2's lacks the
# tasks' `has_retry_policy` (59 lines); 3.1.8's lacks that too, the DAG's allowed_run_types, catchup,
# disable_bundle_versioning and max_consecutive_failed_dag_runs and the params' `source`, and stores a
# conversion's templated `environment` (a dict holding a MappedArgument) as the dict's text (12 tasks).
SERIALIZED_SHAS = {
    "3.3": "80b7391a40398413ad7fc5ec77e0bc1fc8a414178bb9b918b17bfc84c09edb9c",
    "3.2": "3fa5ec5e36564bdc3eeb6dbcf2b19c48b0b42d6f07ef1a4ba57d2810b508632e",
    "3.1": "dad07ca73c73a11e1e4ea25f5bee6255497dda63f085a1d5af559a155cfed601",
}
# The custom attributes of our operators that the summary pins besides Airflow's own.
_ATTRS = (
    "phase",
    "start_condition",
    "state_dir",
    "ssh_conn_id",
    "checkpoint_dir",
    "watch_phase",
    "timeout_secs",
    "poll_interval",
    "settle_seconds",
    "max_attempts",
    "max_attempts_without_progress",
    "stage_args",
    "report_args",
    "script",
    "sbatch_args",
    "deferrable",
    "stream_logs",
    "failure_budget",
    "min_defer_seconds",
    "unknown_timeout",
    "progress_timeout",
    "startup_timeout",
)


def _plain(value: Any) -> Any:
    """JSON-able form; values of a mapped task group's arguments show as their key."""
    if isinstance(value, MappedArgument):
        return f"<mapped {value._key}>"
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value) if type(value).__repr__ is not object.__repr__ else type(value).__name__


def _outlet(outlet: Any) -> str:
    """An asset by what the factory sets (name, URI, group, extra), not by Airflow's repr, which gains a
    field per release (3.3 adds ``access_control``)."""
    if isinstance(outlet, Asset):
        return (
            f"Asset(name={outlet.name!r}, uri={outlet.uri!r}, group={outlet.group!r}, extra={outlet.extra!r})"
        )
    return repr(outlet)


def _group(group: TaskGroup) -> dict[str, Any]:
    out: dict[str, Any] = {"id": group.group_id, "class": type(group).__name__}
    if isinstance(group, MappedTaskGroup):
        out["expand"] = _plain(group._expand_input.value)
    out["children"] = sorted(group.children)
    return out


def summary(dag: DAG) -> dict[str, Any]:
    """What a DAG is made of: tasks, classes, edges, groups, params, settings and our attributes."""
    tasks = {}
    for task_id, task in sorted(dag.task_dict.items()):
        fields = {name: _plain(getattr(task, name)) for name in task.template_fields}
        extra = {name: _plain(getattr(task, name)) for name in _ATTRS if hasattr(task, name)}
        tasks[task_id] = {
            "class": f"{type(task).__module__}.{type(task).__qualname__}",
            "upstream": sorted(task.upstream_task_ids),
            "downstream": sorted(task.downstream_task_ids),
            "group": task.task_group.group_id if task.task_group else None,
            "trigger_rule": str(task.trigger_rule),
            "retries": task.retries,
            "retry_delay": str(task.retry_delay),
            "owner": task.owner,
            "pool": task.pool,
            "outlets": [_outlet(o) for o in task.outlets],
            "callbacks": [type(c).__name__ for c in task.on_failure_callback or []],
            "template_fields": fields,
            "attrs": extra,
        }
    groups = [_group(g) for g in dag.task_group.get_task_group_dict().values()]
    return {
        "dag_id": dag.dag_id,
        "description": dag.description,
        "schedule": repr(dag.schedule),
        "start_date": str(dag.start_date),
        "tags": sorted(dag.tags),
        "max_active_runs": dag.max_active_runs,
        "max_active_tasks": dag.max_active_tasks,
        "catchup": dag.catchup,
        "paused": dag.is_paused_upon_creation,
        "default_args": _plain(dag.default_args),
        "params": _plain(dag.params.dump()),
        "doc_md": dag.doc_md,
        "groups": sorted(groups, key=lambda g: str(g["id"])),
        "tasks": tasks,
    }


def _normalised(text: str) -> str:
    """Without the checkout's location, so the pins hold in any clone, nor the shipped tools' content hash
    (the seed's helper paths name it), so editing include/ does not move the pins."""
    return text.replace(str(REPO), "<repo>").replace(tools_hash(), "<tools-hash>")


def _sha(obj: Any) -> str:
    return hashlib.sha256(_normalised(json.dumps(obj, sort_keys=True, default=str)).encode()).hexdigest()


@pytest.fixture(scope="module")
def seed_dags(tmp_path_factory: pytest.TempPathFactory) -> list[DAG]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AUTOEXP_CACHE_DIR", "off")
    try:
        return build_dags(SEED)
    finally:
        mp.undo()


def test_seed_dags_keep_their_structure(seed_dags: list[DAG]) -> None:
    assert len(seed_dags) == 90
    summaries = [summary(dag) for dag in seed_dags]
    first = _normalised(json.dumps(summaries[0], sort_keys=True, indent=1, default=str))
    assert _sha(summaries) == SUMMARY_SHA, f"structure changed; first DAG now:\n{first}"


def test_seed_dag_serializes_as_before(seed_dags: list[DAG]) -> None:
    """What the DAG processor stores for the scheduler (first and last experiment) is unchanged."""
    serialized = [DagSerialization.serialize_dag(dag) for dag in (seed_dags[0], seed_dags[-1])]
    for item in serialized:
        item.pop("fileloc", None)
        item.pop("relative_fileloc", None)
        item.pop("_processor_dags_folder", None)  # $AIRFLOW_HOME's, differs per test session
    minor = f"{AIRFLOW_VERSION.major}.{AIRFLOW_VERSION.minor}"
    assert _sha(serialized) == SERIALIZED_SHAS[minor], f"Airflow {AIRFLOW_VERSION}'s serialized form changed"
