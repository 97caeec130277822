"""`autoexp airflow-setup`: the pools configs name (deferred tasks counted); their SSH connections checked."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.preflight import job_limits
from autoexp.campaign.preflight.job_limits import DEFAULT_POOL_SLOTS
from autoexp.cli import pools


class SetupError(Exception):
    """A deployment the configs cannot run on (e.g. a missing SSH connection); one line."""


@dataclass(frozen=True)
class PoolSetup:
    """What was done for one pool: its name, its slots, and the connection its tasks use."""

    pool: str
    slots: int
    ssh_conn_id: str
    created: bool
    limits: str = ""  # how the user's Slurm job limits bounded the slots, or why they were not read


def airflow_setup(configs: Sequence[Path], slots: int | None = None) -> list[PoolSetup]:
    """Check every config's SSH connection exists, then create or update its pool, include-deferred,
    sized within the user's Slurm submit limit (read over that connection with sacctmgr).

    An existing pool keeps its slots unless ``slots`` is given; a new one gets ``slots`` or 8; either
    is lowered to the tightest submit limit (association or QOS), since each slot holds at most one
    Slurm job and Slurm refuses submits above the limit. Deferred tasks must count: the Slurm tasks
    wait deferred, and a pool that does not count them caps nothing. When the limits cannot be read
    (cluster unreachable), the pool is sized as asked and the reason is reported.
    Raises SetupError, PoolCliError, or what a broken config raises (``config_errors()``).
    """
    # Connections from the metadata DB as well as secrets backends, as `airflow connections get` reads them.
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")
    from airflow.sdk import Connection
    from slurm_operator.airflow_public import AirflowNotFoundException

    wanted: dict[str, tuple[str, Path]] = {}
    for config in configs:
        _, settings = load_plans(config)
        try:
            Connection.get(settings.ssh_conn_id)
        except AirflowNotFoundException:
            raise SetupError(
                f"{config}: SSH connection {settings.ssh_conn_id!r} does not exist; create it first "
                "(airflow connections add, see docs/dag-factory.md)"
            ) from None
        wanted.setdefault(settings.pool_name, (settings.ssh_conn_id, config))
    done = []
    found = pools.pools() if wanted else {}
    for name, (conn_id, config) in wanted.items():
        existing = found.get(name)
        count = slots if slots is not None else existing.slots if existing is not None else DEFAULT_POOL_SLOTS
        count, note = _within_limits(conn_id, config, count)
        pools.set_pool(name, count, f"autoexp: Slurm jobs over {conn_id}")
        done.append(PoolSetup(name, count, conn_id, created=existing is None, limits=note))
    return done


def _within_limits(conn_id: str, config: Path, count: int) -> tuple[int, str]:
    """(slots, what the limits did to them) for a pool whose tasks use ``conn_id``."""
    from slurm_operator.hooks.slurm import SlurmHook

    from autoexp.campaign.preflight.doctor import probe_for

    probe, _ = probe_for(config)
    try:
        with SlurmHook(conn_id, connect_retries=0) as hook:
            limits = job_limits.read(hook, probe.account, probe.qos)
    except Exception as exc:  # unreachable or no sacctmgr: the pool is still made, the reason said
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return count, f"job limits not read ({reason})"
    sized = limits.pool_slots(count)
    if limits.submit is None:
        return sized, "no submit limit"
    if sized < count:
        return sized, f"lowered from {count} to {job_limits.words(limits.submit)}"
    return sized, f"within {job_limits.words(limits.submit)}"
