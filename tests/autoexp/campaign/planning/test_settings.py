"""The `airflow:` section: defaults, validation, one-line errors with the file and line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from autoexp.campaign.configs.settings_table import settings_table
from autoexp.campaign.planning.settings import (
    AirflowSettings,
    Keys,
    SettingsError,
    parse_settings,
)

DOCS = Path(__file__).resolve().parents[4] / "docs" / "config.md"

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


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"schedule": 5},
            r"airflow\.schedule: expected cron, preset \(@daily\), ISO 8601 duration, or null, got 5$",
        ),
        (
            {"schedule": "61 * * * *"},
            r"airflow\.schedule: expected cron, preset \(@daily\), ISO 8601 duration, or null, "
            r"got '61 \* \* \* \*'$",
        ),
        (
            {"schedule": "@fortnightly"},
            r"airflow\.schedule: expected cron, preset \(@daily\), ISO 8601 duration, or null, "
            r"got '@fortnightly'$",
        ),
        (
            {"schedule": "P"},
            r"airflow\.schedule: expected cron, preset \(@daily\), ISO 8601 duration, or null, got 'P'$",
        ),
        ({"paused": "yes"}, r"airflow\.paused: expected bool, got 'yes'$"),
        ({"catchup": "yes"}, r"airflow\.catchup: expected bool, got 'yes'$"),
        (
            {"start_date": "soon"},
            r"airflow\.start_date: expected a date \(YYYY-MM-DD, or an ISO date-time\), got 'soon'$",
        ),
        ({"keys": 5}, r"airflow\.keys: expected a mapping of role to variable name, got 5$"),
        ({"keys": {"group": ""}}, r"airflow\.keys\.group: expected a variable name, got ''$"),
        ({"notify": "x"}, r"airflow\.notify: expected a mapping, got 'x'$"),
        ({"notify": {"kind": 5}}, r"airflow\.notify\.kind: 5 is not one of log, smtp, slack$"),
        (
            {"notify": {"knd": "log"}},
            r"airflow\.notify\.knd: unknown key \(known: conn_id, deadline_secs, from_email, kind, on_retry, "
            r"on_success, path, to\); did you mean kind\?$",
        ),
        ({"ssh_conn_id": ""}, r"airflow\.ssh_conn_id: must not be empty$"),
        ({"progress_timeout": -1}, r"airflow\.progress_timeout: must be >= 0 \(seconds\)$"),
        (
            {"scheduel": "@daily"},
            r"airflow\.scheduel: unknown key \(known: [a-z_, ]+\); did you mean schedule\?$",
        ),
        ({1: 2}, r"airflow\.1: unknown key \(known: "),
        ({"tags": [1], "retries": -1}, r"airflow\.tags: "),  # the key written first is the one reported
        ({"retries": -1, "tags": [1]}, r"airflow\.retries: "),
    ],
)
def test_every_schema_error_is_one_line(raw: dict[object, object], message: str) -> None:
    with pytest.raises(SettingsError, match=rf"^<airflow settings>: {message}") as caught:
        parse_settings(raw)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)
    # No pydantic dump chained below it in a traceback.
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None


def test_section_that_is_not_a_mapping_names_the_section(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("LR: [1e-3]\nairflow: [retries]\n")
    with pytest.raises(SettingsError, match=rf"^{path}:2: airflow: expected a mapping, got \['retries'\]$"):
        parse_settings(["retries"], path)  # type: ignore[arg-type]


def test_a_rule_across_keys_names_the_line_of_the_key_to_change(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("airflow:\n  notify:\n    kind: slack\n    conn_id: ''\n")
    with pytest.raises(SettingsError, match=rf"^{path}:4: airflow\.notify\.conn_id: kind slack needs"):
        parse_settings({"notify": {"kind": "slack", "conn_id": ""}}, path)


def test_values_keep_their_yaml_type() -> None:
    # An int number of seconds stays an int: it reaches serialized DAGs and trigger kwargs.
    settings = parse_settings({"retry_delay_secs": 10, "poll_interval_secs": 5, "startup_timeout": 1.5})
    assert (type(settings.retry_delay_secs), type(settings.poll_interval_secs)) == (int, int)
    assert settings.startup_timeout == 1.5
    assert parse_settings({"notify": {"kind": "smtp", "to": "a@b"}}).notify.to == ("a@b",)


def test_settings_stay_frozen_dataclasses() -> None:
    settings = parse_settings({"keys": {"group": "RUN"}})
    assert dataclasses.replace(settings, retries=0).retries == 0
    assert {f.name for f in dataclasses.fields(Keys)} >= {"group", "phase", "time_limit"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.retries = 5  # type: ignore[misc]


def test_docs_table_is_generated_from_the_schema() -> None:
    text = DOCS.read_text(encoding="utf-8")
    begin, end = "<!-- settings_table() begin -->\n", "<!-- settings_table() end -->"
    committed = text[text.index(begin) + len(begin) : text.index(end)]
    assert committed == settings_table(), (
        "docs/config.md: paste the output of settings_table() (airflow: keys)"
    )


def test_docs_table_has_every_key_with_its_description() -> None:
    rows = [line.split(" | ") for line in settings_table().splitlines()[2:]]
    keys = [row[0].strip("| `") for row in rows]
    assert keys[:3] == ["dag_id_prefix", "schedule", "start_date"]
    assert {"keys.group", "keys.time_limit", "notify.kind", "notify.conn_id", "unknown_timeout"} <= set(keys)
    assert all(row[-1].strip(" |") not in ("", "None") for row in rows), "every key needs a description"
    unknown = dict(zip(keys, rows, strict=True))["unknown_timeout"]
    assert unknown[1:4] == ["seconds (int or float)", "`1800`", "> 0"]
