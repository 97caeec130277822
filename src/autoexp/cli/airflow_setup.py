"""`autoexp airflow-setup`: the pools configs name (deferred tasks counted); their SSH connections checked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoexp.campaign.configs.planned_config import load_plans

DEFAULT_SLOTS = 8


class SetupError(Exception):
    """A deployment the configs cannot run on (e.g. a missing SSH connection); one line."""


@dataclass(frozen=True)
class PoolSetup:
    """What was done for one pool: its name, its slots, and the connection its tasks use."""

    pool: str
    slots: int
    ssh_conn_id: str
    created: bool


def airflow_setup(configs: Sequence[Path], slots: int | None = None) -> list[PoolSetup]:
    """Check every config's SSH connection exists, then create or update its pool, include-deferred.

    An existing pool keeps its slots unless ``slots`` is given; a new one gets ``slots`` or 8. Deferred
    tasks must count: the Slurm tasks wait deferred, and a pool that does not count them caps nothing.
    Raises SetupError, or what a broken config raises (``config_errors()``).
    """
    # Connections from the metadata DB as well as secrets backends, as `airflow connections get` reads them.
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")
    from airflow.models.connection import Connection
    from airflow.models.pool import Pool
    from slurm_operator.airflow_internals import AirflowNotFoundException

    wanted: dict[str, str] = {}
    for config in configs:
        _, settings = load_plans(config)
        try:
            Connection.get_connection_from_secrets(settings.ssh_conn_id)
        except AirflowNotFoundException:
            raise SetupError(
                f"{config}: SSH connection {settings.ssh_conn_id!r} does not exist; create it first "
                "(airflow connections add, see docs/dag-factory.md)"
            ) from None
        wanted.setdefault(settings.pool_name, settings.ssh_conn_id)
    done = []
    for name, conn_id in wanted.items():
        existing = Pool.get_pool(name)
        count = slots if slots is not None else existing.slots if existing is not None else DEFAULT_SLOTS
        Pool.create_or_update_pool(name, count, f"autoexp: Slurm jobs over {conn_id}", include_deferred=True)
        done.append(PoolSetup(name, count, conn_id, created=existing is None))
    return done
