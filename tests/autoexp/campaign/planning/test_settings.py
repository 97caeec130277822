"""The `airflow:` section: defaults, validation, one-line errors with the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoexp.experiment.settings import AirflowSettings, Keys, SettingsError, parse_settings

YAML = """\
LR: [1e-3]
airflow:
  tags: [scaling]
  retries: 1
  keys:
    group: RUN
    bogus: X
"""


def test_defaults_fit_an_unchanged_autoexperiment_config() -> None:
    settings = parse_settings(None)
    assert settings == AirflowSettings()
    assert settings.keys == Keys()
    assert (settings.keys.phase, settings.keys.mode, settings.keys.branch) == ("PHASE", "MODE", "CD_SCALE")
    assert settings.pool_name == "slurm_slurm_default"
    assert settings.notify.kind == "log"
    # Watchdog defaults: 30 min in a state nobody knows, 1 h without progress after 2 h of start-up.
    assert (settings.unknown_timeout, settings.progress_timeout, settings.startup_timeout) == (
        1800,
        3600,
        7200,
    )


def test_values_are_parsed() -> None:
    raw = {
        "tags": "one",
        "retries": 0,
        "retry_delay_secs": 1.5,
        "ssh_conn_id": "hpc:1",
        "keys": {"group": "RUN"},
        "notify": {"kind": "smtp", "to": ["a@b"]},
        "schedule": None,
        "unknown_timeout": 600,
        "progress_timeout": 0,
    }
    settings = parse_settings(raw)
    assert (settings.unknown_timeout, settings.progress_timeout) == (600, 0)  # 0: no hang detection
    assert settings.tags == ("one",)
    assert settings.retry_delay_secs == 1.5
    assert settings.keys.group == "RUN"
    assert settings.notify.to == ("a@b",)
    assert settings.pool_name == "slurm_hpc_1"


def test_unknown_nested_key_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(YAML)
    raw = {"tags": ["scaling"], "retries": 1, "keys": {"group": "RUN", "bogus": "X"}}
    with pytest.raises(SettingsError, match=rf"^{path}:7: airflow\.keys\.bogus: unknown role \(known: .*\)$"):
        parse_settings(raw, path)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"retries": "2"}, r"airflow\.retries: expected int, got '2'"),
        ({"retries": True}, r"airflow\.retries: expected int, got True"),
        ({"retries": -1}, r"airflow\.retries: must be >= 0"),
        ({"max_attempts": 0}, r"airflow\.max_attempts: must be >= 1"),
        ({"tags": [1]}, r"airflow\.tags: expected a list of strings, got \[1\]"),
        ({"notify": {"kind": "pager"}}, r"airflow\.notify\.kind: 'pager' is not one of log, smtp, slack"),
        ({"notify": {"kind": "slack"}}, r"airflow\.notify\.conn_id: kind slack needs the Airflow connection"),
        ({"notify": {"kind": "smtp"}}, r"airflow\.notify\.to: kind smtp needs at least one recipient"),
        ({"dag_id_prefix": "a b"}, r"airflow\.dag_id_prefix: only letters, digits"),
        ({"scheduel": "@daily"}, r"airflow\.scheduel: unknown key \(known: .*schedule"),
        ({"unknown_timeout": 0}, r"airflow\.unknown_timeout: must be > 0 \(seconds\)"),
        ({"progress_timeout": -1}, r"airflow\.progress_timeout: must be >= 0"),
        ({"progress_timeout": "1h"}, r"airflow\.progress_timeout: expected int or float, got '1h'"),
        ({"startup_timeout": -5.0}, r"airflow\.startup_timeout: must be >= 0"),
    ],
)
def test_bad_values_give_one_line_errors(raw: dict[str, object], message: str) -> None:
    with pytest.raises(SettingsError, match=rf"^<airflow settings>: {message}"):
        parse_settings(raw)
