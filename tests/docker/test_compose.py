"""docker-compose.yaml, validated by docker-compose itself: services, mounts, health, ports, secrets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docker.compose import (
    COMPOSE_FILE,
    DOCKERFILES,
    ENV_EXAMPLE,
    REPO,
    compose_config,
    dockerfile_instructions,
    secret_findings,
)
from tests.fixtures.slurm_cluster import CONN_ID

AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
ONE_SHOT = {"airflow-secrets", "airflow-init"}
LONG_RUNNING = AIRFLOW_SERVICES | {"postgres", "slurm"}
HEALTHY = "service_healthy"
DONE = "service_completed_successfully"


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return compose_config()


@pytest.fixture(scope="module")
def services(config: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = config["services"]
    return result


def volume_targets(service: dict[str, Any]) -> dict[str, str]:
    """container path -> source (a repo-relative path for bind mounts, the name for volumes)."""
    targets = {}
    for spec in service.get("volumes", []):
        source, target = spec.split(":")[:2]
        if source.startswith("/"):
            source = str(Path(source).relative_to(REPO))
        targets[target] = source
    return targets


def test_service_set(services: dict[str, Any]) -> None:
    assert set(services) == LONG_RUNNING | ONE_SHOT


def test_airflow_runs_localexecutor_on_postgres_from_the_project_image(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_CMD"] == "cat /opt/airflow/secrets/sql_alchemy_conn"
        assert services[name]["build"]["dockerfile"] == "docker/airflow/Dockerfile", name
    assert services["postgres"]["image"].startswith("postgres:")
    # Compose v1 keeps a one-word command as a string, v2 turns it into a list.
    commands = {
        name: " ".join(list(services[name]["command"]))
        if isinstance(services[name]["command"], list)
        else services[name]["command"]
        for name in AIRFLOW_SERVICES
    }
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }
    # Task processes reach the execution API by the api-server's service name and port.
    url = services["airflow-scheduler"]["environment"]["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    assert url == "http://airflow-apiserver:8080/execution/"


def test_images_build_from_the_expected_bases() -> None:
    airflow, slurm = (list(dockerfile_instructions(path)) for path in DOCKERFILES)
    assert ("FROM", "apache/airflow:3.3.2-python3.11") in airflow
    assert ("FROM", "debian:bookworm-slim") in slurm
    # The slurm image installs with the same script as a developer machine and CI.
    assert any(word == "RUN" and rest.startswith("./scripts/bootstrap") for word, rest in slurm)
    assert dict(slurm)["ENTRYPOINT"] == '["/opt/autoexp/docker/slurm/entrypoint.sh"]'


def test_project_folders_are_mounted(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES | {"airflow-init"}:
        mounts = volume_targets(services[name])
        for folder in ("dags", "plugins", "include", "config", "src"):
            assert mounts.get(f"/opt/autoexp/{folder}") == folder, (name, folder)
        assert mounts["/opt/airflow/slurm-ssh"] == "slurm-ssh", name
        assert mounts["/opt/airflow/secrets"] == "airflow-secrets", name
    # The cluster sees include/ at the same absolute path as Airflow, so rendered scripts agree.
    slurm = volume_targets(services["slurm"])
    assert slurm["/opt/autoexp/include"] == "include"
    assert slurm["/run/autoexp-ssh"] == "slurm-ssh"
    assert slurm["/opt/autoexp/.state"] == "slurm-state"


def test_project_mounts_are_read_only_and_the_ssh_share_too(services: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        for spec in services[name]["volumes"]:
            if spec.split(":")[1].startswith(("/opt/autoexp/", "/opt/airflow/slurm-ssh")):
                assert spec.endswith(":ro"), (name, spec)


def test_every_long_running_service_has_a_health_check(services: dict[str, Any]) -> None:
    for name in LONG_RUNNING:
        check = services[name].get("healthcheck") or {}
        assert check.get("test"), name
        assert not check.get("disable"), name
    for name in ONE_SHOT:
        # One-shots are waited on with service_completed_successfully instead, and never restarted.
        assert services[name]["restart"] == "no", name


def test_published_ports_bind_loopback_only(services: dict[str, Any]) -> None:
    published = [(name, port) for name, svc in services.items() for port in svc.get("ports", [])]
    assert published, "the api-server must be published"
    for name, port in published:
        assert port.startswith("127.0.0.1:"), (name, port)
    assert ("airflow-apiserver", "127.0.0.1:8080:8080/tcp") in published


def test_port_comes_from_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("AIRFLOW_API_PORT=18080\nAIRFLOW_UID=1234\n")
    services = compose_config(env_file)["services"]
    assert services["airflow-apiserver"]["ports"] == ["127.0.0.1:18080:8080/tcp"]
    assert services["airflow-scheduler"]["user"] == "1234:0"
    assert services["slurm"]["environment"]["AIRFLOW_UID"] == "1234"


def test_depends_on_conditions(services: dict[str, Any]) -> None:
    def deps(name: str) -> dict[str, str]:
        return {dep: spec["condition"] for dep, spec in services[name].get("depends_on", {}).items()}

    assert deps("postgres") == {"airflow-secrets": DONE}
    assert deps("slurm") == {}
    assert deps("airflow-init") == {"airflow-secrets": DONE, "postgres": HEALTHY, "slurm": HEALTHY}
    for name in AIRFLOW_SERVICES:
        assert deps(name)["airflow-init"] == DONE, name
        assert deps(name)["postgres"] == HEALTHY, name
    # Tasks (scheduler, LocalExecutor) and triggers (triggerer) talk to the cluster.
    for name in ("airflow-scheduler", "airflow-triggerer"):
        assert deps(name)["slurm"] == HEALTHY, name


def test_no_secret_is_written_in_the_file(config: dict[str, Any]) -> None:
    assert secret_findings(config, COMPOSE_FILE.read_text()) == []
    env = config["services"]["airflow-scheduler"]["environment"]
    for key in ("SQL_ALCHEMY_CONN", "FERNET_KEY", "JWT_SECRET", "SECRET_KEY"):
        assert not any(k.endswith(key) for k in env), f"{key} must come from a *_CMD file"


def test_secret_check_catches_a_written_password() -> None:
    doctored = {"services": {"postgres": {"environment": {"POSTGRES_PASSWORD": "airflow"}}}}
    assert secret_findings(doctored, "") == ["postgres: POSTGRES_PASSWORD"]
    raw = "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN: postgresql+psycopg2://airflow:airflow@postgres/airflow"
    assert secret_findings({}, raw) == ["url credentials: postgresql+psycopg2://airflow:airflow@"]


def test_env_example_carries_no_secret() -> None:
    for number, line in enumerate(ENV_EXAMPLE.read_text().splitlines(), 1):
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#") and "PASSWORD" in key:
            assert value == "", f".env.example:{number}: {key} must stay empty"


def test_connection_id_matches_the_local_cluster(services: dict[str, Any]) -> None:
    assert services["airflow-init"]["environment"]["AUTOEXP_SSH_CONN_ID"] == CONN_ID


def test_demo_paths_agree_between_airflow_and_the_cluster(services: dict[str, Any]) -> None:
    """config/demo.yaml renders ${AUTOEXP_ROOT}/.venv/bin/python and ${AUTOEXP_DEMO_DIR} in Airflow; the
    slurm image must have them at the same paths (its venv is /opt/autoexp/.venv, from bootstrap)."""
    airflow_env = services["airflow-scheduler"]["environment"]
    assert airflow_env["AUTOEXP_ROOT"] == "/opt/autoexp"
    demo_dir = airflow_env["AUTOEXP_DEMO_DIR"]
    assert services["slurm"]["environment"]["AUTOEXP_DEMO_DIR"] == demo_dir
    assert volume_targets(services["slurm"])[str(Path(demo_dir).parent)] == "slurm-runs"
    assert dict(dockerfile_instructions(DOCKERFILES[1]))["WORKDIR"] == airflow_env["AUTOEXP_ROOT"]


@pytest.mark.parametrize("script", ["docker/airflow/init.sh", "scripts/demo"])
def test_pools_are_created_counting_deferred_tasks(script: str) -> None:
    # The Slurm tasks wait deferred: a pool that does not count them caps nothing.
    lines = [line for line in (REPO / script).read_text().splitlines() if "pools set" in line]
    assert lines, f"{script} creates no pool"
    for line in lines:
        assert "--include-deferred" in line, f"{script}: {line.strip()}"


def test_the_triggerer_holds_every_wait_of_the_seed_campaign_at_once(services: dict[str, Any]) -> None:
    """Each running experiment defers all its checkpoint and branch waits and its trainings' job
    triggers; a triggerer runs at most [triggerer] capacity of them (Airflow's default 1,000)."""
    from autoexp.campaign.configs.planned_config import PlannedConfig

    planned = PlannedConfig.load(REPO / "config" / "scaling_exps.yaml")
    waits = 0
    for dag_plan in planned.dag_plans():
        for phase in dag_plan.phases:
            waits += 1 + (phase.branch_wait is not None)  # the training's job trigger, its branch wait
            waits += len(phase.checkpoints.instances) if phase.checkpoints is not None else 0
    assert waits > 1000  # more than Airflow's default capacity
    capacity = int(services["airflow-triggerer"]["environment"]["AIRFLOW__TRIGGERER__CAPACITY"])
    assert capacity >= waits, f"the seed defers {waits} triggers at once"
