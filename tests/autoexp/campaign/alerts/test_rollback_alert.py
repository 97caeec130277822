"""A checkpoint rollback is one alert: each line ckpt_check's real ``heal`` records (here for a truncated
checkpoint) is one alert naming the checkpoint, the record and the log; its refusal at the limit
records no line (the task's failure alert says that one)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autoexp_cluster.ckpt_check import ROLLBACKS, heal

from autoexp.campaign.alerts.notifier import RollbackAlert, Target
from tests.fixtures.checkpoint_layouts import cut_short, iter_dir, legacy, set_tracker
from tests.support.rollbacks import roll_back

CONTEXT: Any = {
    "ti": SimpleNamespace(task_id="pretrain.train", map_index=-1),
    "dag_run": SimpleNamespace(dag_id="exp_dag", run_id="r1"),
}


def test_each_rollback_is_one_alert_naming_its_checkpoint_record_and_log(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    first, second = roll_back(checkpoints, 300, 637), roll_back(checkpoints, 100, 200, minute=1)
    alerts = tmp_path / "alerts.log"
    alert = RollbackAlert("exp", Target(path=str(alerts)), str(checkpoints))
    assert alert(CONTEXT, "/runs/e/train-42.out", [first, second]) == 2
    text = alerts.read_text()
    assert text.count("autoexp ROLLBACK") == 2
    assert "ROLLBACK: experiment=exp task=pretrain.train checkpoint=iter_0000637\n" in text
    assert "ROLLBACK: experiment=exp task=pretrain.train checkpoint=iter_0000200\n" in text
    assert text.count("log=/runs/e/train-42.out\n") == 2
    assert f"{checkpoints / ROLLBACKS}: {first}\n" in text
    assert "-> iter_0000637.corrupt-20261203T080000Z (mp_rank_00/model_optim_rng.pt: " in first
    assert first.endswith("resuming from iter_0000300")


def test_a_refusal_at_the_limit_records_no_rollback(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    roll_back(checkpoints, 300, 637)
    legacy(checkpoints, 700)
    set_tracker(checkpoints, 700)
    cut_short(iter_dir(checkpoints, 700) / "mp_rank_00" / "model_optim_rng.pt")
    now = datetime(2026, 12, 3, 9, 0, tzinfo=timezone.utc)
    assert heal(checkpoints, max_rollbacks=1, now=now).action == "refused"
    assert len((checkpoints / ROLLBACKS).read_text().splitlines()) == 1
