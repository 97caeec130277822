"""The DAGs folder the real-scheduler+triggerer tests share: dags/rt_dags.py with its rt.json settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

DAGS = Path(__file__).with_name("dags")


def rt_dags_folder(base: Path, work: Path, conn_id: str, counted_conn_id: str, many_interval: int) -> Path:
    """A DAGs folder under ``base`` holding a copy of rt_dags.py and the settings it reads."""
    dags = base / "dags"
    dags.mkdir()
    shutil.copy(DAGS / "rt_dags.py", dags)
    settings = {
        "work": str(work),
        "conn_id": conn_id,
        "counted_conn_id": counted_conn_id,
        "many_interval": many_interval,
    }
    (dags / "rt.json").write_text(json.dumps(settings))
    return dags
