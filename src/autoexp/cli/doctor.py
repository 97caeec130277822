"""The Airflow side of `autoexp doctor`: the plugin's SSH hook (host key checked) and stage_tools."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from autoexp.campaign.preflight.doctor import Check, probe_for, run_checks
from autoexp.campaign.preflight.job_limits import DEFAULT_POOL_SLOTS
from autoexp.cli import pools


def doctor(config: Path, overrides: Sequence[str] = (), conn_id: str | None = None) -> list[Check]:
    """Every check of ``config`` against the cluster of ``conn_id`` (default: the config's ssh_conn_id)."""
    from slurm_operator.hooks.slurm import SlurmHook

    from autoexp.campaign.tasks.task_callables import stage_tools

    probe, configured = probe_for(config, overrides)
    conn = conn_id or configured
    hook = SlurmHook(conn, cmd_timeout=120, connect_retries=0)
    try:
        reply = hook.run("echo autoexp-doctor")
    except Exception as exc:  # any failure to connect is the report's first line, not a traceback
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [Check("ssh", False, f"{conn}: {reason}; check the connection's host, user, key and host key")]
    with hook:
        if reply.stdout.strip() != "autoexp-doctor":
            return [Check("ssh", False, f"{conn}: the login shell printed {reply.stdout.strip()[:200]!r}")]
        route = hook.route_note or "host key accepted"
        slots = pool_slots(probe.pool)
        return run_checks(hook, probe, lambda tools: stage_tools(hook, tools), route=route, pool_slots=slots)


def pool_slots(pool: str) -> int:
    """The pool's slots now; the size ``airflow-setup`` would give it when it does not exist (yet)."""
    try:
        found = pools.pools().get(pool)
    except pools.PoolCliError:  # no reachable metadata database: doctor checks the cluster, not Airflow
        found = None
    return found.slots if found is not None else DEFAULT_POOL_SLOTS
