"""`airflow.remote_dir` accepts plain {VAR} fields only, each a variable of the pretrain TRAIN job."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.plan import PlanError
from autoexp.campaign.planning.settings import SettingsError

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


def _plan_remote_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remote_dir: str) -> tuple[Path, str]:
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", "off")
    text = DEMO.read_text().replace("  paused: false\n", f"  paused: false\n  remote_dir: '{remote_dir}'\n")
    config = tmp_path / "c.yaml"
    config.write_text(text)
    plans, settings = load_plans(config)
    return config, plan_dag(plans[0], settings).remote_dir


@pytest.mark.parametrize(
    ("remote_dir", "why"),
    [
        ("{RUN_DIR.__class__}/x", "only {VAR} fields are allowed, not {RUN_DIR.__class__}"),
        ("{RUN_DIR[0]}", "only {VAR} fields are allowed, not {RUN_DIR[0]}"),
        ("{RUN_DIR!r}", "only {VAR} fields are allowed, not {RUN_DIR!r}"),
        ("{RUN_DIR:>9999}", "only {VAR} fields are allowed, not {RUN_DIR:>9999}"),
        ("{0}/x", "only {VAR} fields are allowed, not {0}"),
        ("{}/x", "only {VAR} fields are allowed, not {}"),
        ("{RUN_DIR", "'{RUN_DIR' is not a valid format string (expected '}' before end of string); "),
    ],
)
def test_other_fields_are_refused_where_the_key_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, remote_dir: str, why: str
) -> None:
    with pytest.raises(SettingsError) as info:
        _plan_remote_dir(tmp_path, monkeypatch, remote_dir)
    line = DEMO.read_text().splitlines().index("  paused: false") + 2
    assert str(info.value).startswith(f"{tmp_path / 'c.yaml'}:{line}: airflow.remote_dir: {why}")
    assert "\n" not in str(info.value)


def test_unknown_variable_names_file_line_and_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PlanError) as info:
        _plan_remote_dir(tmp_path, monkeypatch, "{LOGS}/{NOPE}")
    line = DEMO.read_text().splitlines().index("  paused: false") + 2
    assert str(info.value) == (
        f"{tmp_path / 'c.yaml'}:{line}: airflow.remote_dir: {{NOPE}} is not a variable of job "
        "demo_tiny_lr0.002_bs4_PRETRAIN_TRAIN"
    )


def test_plain_fields_and_doubled_braces_fill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, remote_dir = _plan_remote_dir(tmp_path, monkeypatch, "{LOGS}/{{lit}}/{EXP_NAME}")
    assert remote_dir.endswith("/.state/demo/campaign/runs/{lit}/demo_tiny_lr0.002_bs4")
