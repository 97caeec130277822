"""Every private Airflow API the campaign layer relies on, and nowhere else (pinned by its test).

Each entry says why no public API does the job. Airflow upgrades break here first.
"""

from __future__ import annotations

# -- DAG building (used by the factory) -------------------------------------------------------------
# A mapped task group is public only as ``@task_group`` + ``.expand_kwargs()``: the decorator
# inspects the function's signature, binds its arguments and walks the values for XCom references,
# for each of the ~540 groups of config/scaling_exps.yaml. Our values are plain (no XComArg), so the
# factory builds what that decorator builds: the group, its expand input (a list of dicts, one per
# instance) and, per task argument, a reference to one key of it resolved per instance. No public
# name exists for any of the three (``airflow.sdk`` exports only TaskGroup).
from airflow.sdk.definitions._internal.expandinput import ListOfDictsExpandInput as ListOfDictsExpandInput
from airflow.sdk.definitions._internal.expandinput import MappedArgument as MappedArgument
from airflow.sdk.definitions.taskgroup import MappedTaskGroup as MappedTaskGroup


# -- the triggerer's comms (used by ti_states) ----------------------------------------------------
