"""Benchmark: one state poll of N jobs (batched, shared connection) vs AutoExperiment's 2 squeue per job."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as `python bench/bench_slurm_poll.py`

from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.remote import commands

from tests.fixtures.slurm_cluster import start_cluster, stop_cluster

SIZES = (1, 10, 100)


async def batched_poll(conn_id: str, ids: list[str]) -> tuple[int, int, float, int]:
    """(commands, new connections, seconds, records) for one poll on a warm shared connection."""
    hook = AsyncSlurmHook(conn_id)
    await hook.run("true")  # warm: the triggerer keeps its connection open between polls
    shared = hook.shared
    cmds, conns = shared.commands_run, shared.connections_opened
    t0 = time.perf_counter()
    states = await hook.job_states(ids)
    wall = time.perf_counter() - t0
    result = (shared.commands_run - cmds, shared.connections_opened - conns, wall, len(states.records))
    await hook.close()
    return result


def per_job_poll(hook: SlurmHook, ids: list[str]) -> tuple[int, float]:
    """AutoExperiment's monitor: two squeue calls per job per check (state, then the running list)."""
    before = hook.commands_run
    t0 = time.perf_counter()
    for job in ids:
        hook.run(f"squeue -h -j {commands.job_id(job)} -o %T")
        hook.run(f"squeue -h -j {commands.job_id(job)} -o %i")
    return hook.commands_run - before, time.perf_counter() - t0


def main() -> None:
    cluster = start_cluster(prefix="autoexp-bench-")
    os.environ[cluster.conn_env_var] = cluster.airflow_conn_json
    try:
        hook = SlurmHook(cluster.conn_id)
        rows = []
        for n in SIZES:
            ids = [
                hook.submit(
                    script="#!/bin/bash\ntrue\n", sbatch_args=["--output=/dev/null", "-J", f"bench{n}"]
                )
                for _ in range(n)
            ]
            cmds, conns, wall, found = asyncio.run(batched_poll(cluster.conn_id, ids))
            assert found >= n, f"poll saw {found} of {n} jobs"
            old_cmds, old_wall = per_job_poll(hook, ids)
            rows.append((n, cmds, conns, wall, old_cmds, old_wall))
        hook.close()
        head = ("N jobs", "batched: cmds", "new conns", "wall s", "per-job: cmds", "wall s")
        print("{:>6} | {:>13} {:>9} {:>7} | {:>13} {:>7}".format(*head))
        for n, cmds, conns, wall, old_cmds, old_wall in rows:
            print(f"{n:>6} | {cmds:>13} {conns:>9} {wall:>7.3f} | {old_cmds:>13} {old_wall:>7.3f}")
        print("batched = AsyncSlurmHook.job_states on the shared connection (sacct, one command);")
        print("per-job = AutoExperiment's 2 squeue calls per job, here over one reused SSH connection.")
    finally:
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
