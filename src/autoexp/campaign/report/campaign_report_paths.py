"""Where a campaign's report files live on the Airflow side (read by the API server and the UI plugin)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

REPORT_ROOT_ENV = "AUTOEXP_REPORT_ROOT"


def campaign_report_dir(stem: str, environ: Mapping[str, str] = os.environ) -> Path:
    """``$AUTOEXP_REPORT_ROOT/<stem>``, else ``$AIRFLOW_HOME/autoexp-reports/<stem>`` (Airflow's own
    default home ``~/airflow`` when AIRFLOW_HOME is unset)."""
    root = environ.get(REPORT_ROOT_ENV)
    if not root:
        home = environ.get("AIRFLOW_HOME") or str(Path("~/airflow").expanduser())
        root = str(Path(home) / "autoexp-reports")
    return Path(root) / stem
