"""The factory gives every training operator its rollback alert, on the checkpoint folder its job saves to."""

from __future__ import annotations

import posixpath
from pathlib import Path

import pytest

from autoexp.campaign.alerts.notifier import RollbackAlert
from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.dags.factory import build_dags
from autoexp.campaign.tasks.operators import CampaignSlurmOperator

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


def test_every_training_alerts_the_rollbacks_of_its_own_checkpoint_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    trains = [t for dag in build_dags(DEMO) for t in dag.tasks if t.task_id.endswith(".train")]
    assert len(trains) > 1
    folders = set()
    for train in trains:
        assert isinstance(train, CampaignSlurmOperator), train
        alert = train.rollback_alert
        assert isinstance(alert, RollbackAlert), train.task_id
        # The folder whose tracker the training's progress watches: its --save folder.
        assert alert.checkpoint_dir == posixpath.dirname(train.progress_paths[0]), train.task_id
        assert alert.experiment in train.dag_id, train.task_id
        folders.add(alert.checkpoint_dir)
    assert len(folders) == len(trains)  # one record per training
