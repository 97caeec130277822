"""Stage refuses a config that is not the one its DAG was planned from: other bytes, other env values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from autoexp.campaign.configs.config_source import config_hash, env_values
from autoexp.campaign.tasks import task_callables


def stage(path: Path, digest: str, env: dict[str, str | None]) -> Any:
    context: Any = {"params": {"dry_run": True}}
    return task_callables.stage(
        config_path=str(path),
        expected_hash=digest,
        expected_env=env,
        scripts={},
        copies={},
        ssh_conn_id="unused",
        context=context,
    )


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "camp.yaml"
    path.write_text('LOGS: "${oc.env:CAMP_LOGS}/runs"\n')
    monkeypatch.setenv("CAMP_LOGS", "/scratch/a")
    return path


def test_a_changed_env_value_the_config_reads_is_refused(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    digest, env = config_hash(config), env_values(config)
    assert env == {"CAMP_LOGS": "/scratch/a"}
    monkeypatch.setenv("CAMP_LOGS", "/scratch/b")
    with pytest.raises(
        AirflowException, match=r"^\S+camp\.yaml reads \$\{oc\.env:CAMP_LOGS\}: '/scratch/a' when"
    ) as err:
        stage(config, digest, env)
    assert "'/scratch/b' on this worker" in str(err.value)
    assert "\n" not in str(err.value)
    monkeypatch.delenv("CAMP_LOGS")
    with pytest.raises(AirflowException, match="None on this worker"):
        stage(config, digest, env)


def test_changed_bytes_are_refused(config: Path) -> None:
    digest, env = config_hash(config), env_values(config)
    config.write_text('LOGS: "${oc.env:CAMP_LOGS}/other"\n')
    with pytest.raises(AirflowException, match=rf"changed since this DAG was parsed \(hash {digest}\)"):
        stage(config, digest, env)
