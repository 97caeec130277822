"""The plugin file stays light (every task process loads it); its app is the real one once called."""

from __future__ import annotations

import os
import subprocess
import sys

from starlette.testclient import TestClient

from autoexp.campaign.ui.lazy_app import LazyApp
from tests.support.checkout import REPO_ROOT

HEAVY = ("autoexp.campaign.ui.app", "airflow.api_fastapi.core_api.security", "fastapi")


def test_loading_the_plugin_imports_no_fastapi_app() -> None:
    code = (
        "import sys, airflow.plugins_manager, autoexp_campaigns\n"
        "plugin = autoexp_campaigns.AutoexpCampaignsPlugin\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
        "print(plugin.fastapi_apps[0]['url_prefix'], [v['destination'] for v in plugin.external_views])\n"
    )
    paths = ":".join(str(REPO_ROOT / p) for p in ("src", "plugins", "include"))
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONPATH": paths},  # the session's private AIRFLOW_HOME
    )
    assert out.stdout.splitlines() == ["[]", "/campaigns ['nav', 'dag_run']"], out.stderr


def test_the_first_request_reaches_the_real_app_behind_airflows_login() -> None:
    with TestClient(LazyApp()) as client:
        answer = client.get("/api/campaigns")
    # Airflow's get_user refuses a request without a token before asking any auth manager.
    assert (answer.status_code, answer.json()) == (401, {"detail": "Not authenticated"})
    assert "autoexp.campaign.ui.app" in sys.modules
