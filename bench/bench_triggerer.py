"""Benchmark: N deferred SlurmJobTriggers in one event loop (as in the triggerer): CPU, memory, commands."""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from slurm_operator.hooks import SlurmHook
from slurm_operator.poller import SlurmPoller
from slurm_operator.triggers import SlurmJobTrigger


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def _hold(
    conn_id: str, job_ids: list[str], n: int, interval: float, duration: float
) -> dict[str, float]:
    """Run n triggers (round-robin over the real job ids) for `duration` seconds."""
    triggers = [
        SlurmJobTrigger(conn_id, job_ids[i % len(job_ids)], poll_interval=interval, stream_logs=False)
        for i in range(n)
    ]
    tasks = [asyncio.create_task(anext(t.run())) for t in triggers]  # type: ignore[arg-type]
    await asyncio.sleep(interval)  # let every subscription settle before measuring
    poller = SlurmPoller.for_conn(conn_id)
    rounds0, cpu0, t0 = poller.rounds, time.process_time(), time.monotonic()
    await asyncio.sleep(duration)
    rounds, cpu, wall = poller.rounds - rounds0, time.process_time() - cpu0, time.monotonic() - t0
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "triggers": n,
        "distinct_jobs": len(set(job_ids)),
        "cpu_percent_of_core": round(100 * cpu / wall, 2),
        "rss_mb": round(_rss_mb(), 1),
        "queries": rounds,
        "queries_per_interval": round(rounds / (wall / interval), 2),
    }


def main() -> None:
    """Submit sleeping jobs, hold N triggers on them, print one JSON line per N, cancel the jobs."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--conn-id", default="slurm_local")
    ap.add_argument("--counts", default="1,100,1000")
    ap.add_argument("--jobs", type=int, default=8, help="real sleeping jobs the triggers watch")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--workdir", default="/tmp")
    args = ap.parse_args()
    hook = SlurmHook(args.conn_id)
    ids = [
        hook.submit(
            script="#!/bin/bash\nsleep 600\n",
            upload_to=f"{args.workdir}/bench-sleep.sbatch",
            sbatch_args=["--job-name=bench-sleep", f"--output={args.workdir}/bench-%j.out"],
        )
        for _ in range(args.jobs)
    ]
    try:
        for n in (int(c) for c in args.counts.split(",")):
            print(
                json.dumps(asyncio.run(_hold(args.conn_id, ids, n, args.interval, args.duration))), flush=True
            )
    finally:
        for job_id in ids:
            hook.cancel(job_id)
    print(json.dumps({"max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
