"""A checkpoint rollback is alerted once: the line ckpt_check prints (made here by its real ``heal`` on a
truncated checkpoint) is found in the one attempt log that did it, and the refusal is no rollback."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from autoexp_cluster.ckpt_check import heal

from autoexp.campaign.alerts.messages import rollbacks_in
from autoexp.campaign.alerts.notifier import RollbackAlert, Target
from tests.fixtures.checkpoint_layouts import cut_short, iter_dir, legacy

NOW = datetime(2026, 12, 3, 8, 30, tzinfo=timezone.utc)


def _heal_messages(checkpoints: Path) -> tuple[str, str]:
    """ckpt_check's line for a rollback, then its refusal once the limit (1) is reached."""
    legacy(checkpoints, 300)
    legacy(checkpoints, 637)
    cut_short(iter_dir(checkpoints, 637) / "mp_rank_00" / "model_optim_rng.pt")
    rolled = heal(checkpoints, max_rollbacks=1, now=NOW)
    assert rolled.action == "rolled_back"
    legacy(checkpoints, 700)
    cut_short(iter_dir(checkpoints, 700) / "mp_rank_00" / "model_optim_rng.pt")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("700\n")
    refused = heal(checkpoints, max_rollbacks=1, now=NOW)
    assert refused.action == "refused"
    return rolled.message, refused.message


def test_each_rollback_is_alerted_once_from_the_log_that_made_it(tmp_path: Path) -> None:
    rolled, refused = _heal_messages(tmp_path / "checkpoints")
    logs = {
        # the attempt that crashed reading the truncated checkpoint: no rollback yet
        "/runs/e/train-41.out": (
            "iter_0000637/mp_rank_00/model_optim_rng.pt: unreadable, not a torch.save file\n"
        ),
        # the next one: ckpt_check rolled back, the trainer resumed
        "/runs/e/train-42.out": (
            f"{rolled}\n loading checkpoint from /ckpt at iteration 300\n iteration 301/ 1200 |\n"
        ),
        # a later one refused (exit 3): the task's failure alert says so, not a rollback alert
        "/runs/e/train-43.out": f"{refused}\n",
    }
    alerts = tmp_path / "alerts.log"
    context: Any = {
        "ti": SimpleNamespace(task_id="pretrain.train", map_index=-1),
        "dag_run": SimpleNamespace(dag_id="exp_dag", run_id="r1"),
    }
    assert RollbackAlert("exp", Target(path=str(alerts)))(context, logs) == 1
    text = alerts.read_text()
    assert text.count("autoexp ROLLBACK") == 1
    assert "ROLLBACK: experiment=exp task=pretrain.train checkpoint=iter_0000637" in text
    assert "log=/runs/e/train-42.out" in text
    assert "set aside as iter_0000637.corrupt-20261203T083000Z, resuming from iter_0000300" in text
    assert rollbacks_in(refused) == []
