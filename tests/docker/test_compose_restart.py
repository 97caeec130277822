"""docker-compose.yaml restarts every long-running Airflow component after it exits (a database
restart makes the scheduler, DAG processor and triggerer exit) and never a one-shot service.

Checked on `docker-compose config` only: there is no Docker engine here, so the restart itself
is not run (docs/real-cluster.md says so); the local stacks' supervisord restart is run for real in
tests/e2e/test_database_restart.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.docker.compose import compose_config
from tests.fixtures.airflow_stack import supervisor_module

# Docker restarts a container with these after any exit, also a clean one ("on-failure" would not
# after exit code 0; "no" never), with a growing delay between tries (from 100 ms, doubling).
RESTARTS_AFTER_ANY_EXIT = {"always", "unless-stopped"}
ONE_SHOT_WAIT = "service_completed_successfully"


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    result: dict[str, Any] = compose_config()["services"]
    return result


def supervised_components() -> tuple[str, ...]:
    """The components scripts/demo runs under supervisord (scripts/lib/airflow_supervisor.py)."""
    components: tuple[str, ...] = supervisor_module().COMPONENTS
    return components


def airflow_component(service: dict[str, Any]) -> str | None:
    """The `airflow <component>` a service runs (the image's entrypoint is `airflow`), or None."""
    command = service.get("command")
    words = command.split() if isinstance(command, str) else list(command or [])
    if service.get("entrypoint") is not None or len(words) != 1:
        return None
    return str(words[0])


def test_every_airflow_component_restarts_after_an_exit(services: dict[str, Any]) -> None:
    components = {name: airflow_component(svc) for name, svc in services.items()}
    running = {name: c for name, c in components.items() if c is not None}
    # The same four as the supervised local stacks: none is left out of either.
    assert sorted(running.values()) == sorted(supervised_components()), running
    for name in running:
        assert services[name].get("restart") in RESTARTS_AFTER_ANY_EXIT, (name, services[name].get("restart"))
    # What they need runs on too: the metadata database and the cluster.
    for name in ("postgres", "slurm"):
        assert services[name].get("restart") in RESTARTS_AFTER_ANY_EXIT, name


def test_one_shot_services_are_never_restarted(services: dict[str, Any]) -> None:
    one_shots = {
        dep
        for svc in services.values()
        for dep, how in (svc.get("depends_on") or {}).items()
        if how.get("condition") == ONE_SHOT_WAIT
    }
    assert one_shots == {"airflow-secrets", "airflow-init"}, one_shots
    for name in one_shots:
        # A restarted init would migrate and set up again after every exit, a success included.
        assert services[name].get("restart", "no") == "no", name
        assert airflow_component(services[name]) is None, name
