"""CampaignJobTrigger's serialized form: the triggerer rebuilds it from exactly these arguments."""

from __future__ import annotations

import json

from airflow.sdk.module_loading import import_string
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from autoexp.campaign.triggerer.job_trigger import CampaignJobTrigger
from tests.slurm_operator.triggers.test_slurm_job import JOB_KWARGS

OWN = {"stopped_path": "/s/pretrain.stopped", "state_timeout": 2.0, "finished_path": "/s/pretrain.finished",
       "checkpoint_dir": "/c/ckpt"}  # fmt: skip
# Every SlurmJobTrigger argument, away from its default where it has one.
BASE = {**JOB_KWARGS, "stream_logs": False, "end_task_on_success": True, "completion_regex": "done"}


def test_serialize_returns_its_own_and_the_job_trigger_s_arguments() -> None:
    _, kwargs = CampaignJobTrigger(**BASE, **OWN).serialize()
    assert kwargs == {**BASE, **OWN}
    assert set(kwargs) - set(SlurmJobTrigger("c", "1").serialize()[1]) == set(OWN)


def test_a_stored_row_rebuilds_the_same_trigger() -> None:
    classpath, kwargs = CampaignJobTrigger(**BASE, **OWN).serialize()
    assert classpath == "autoexp.campaign.triggerer.job_trigger.CampaignJobTrigger"  # as stored before
    rebuilt = import_string(classpath)(**json.loads(json.dumps(kwargs)))  # the row's kwargs are JSON
    assert type(rebuilt) is CampaignJobTrigger
    assert rebuilt.serialize() == (classpath, kwargs)
