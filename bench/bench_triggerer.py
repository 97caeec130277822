"""Benchmark: N deferred SlurmJobTriggers in one event loop (as in the triggerer): CPU, memory, SSH commands.

Self-contained: starts a private local cluster (scripts/local-cluster) and a counting sshd in front of
it, submits one job array of sleeping jobs (8 run, the rest pend), holds N triggers on N distinct
array tasks for a while, and reports per N: CPU of this process (% of one core), its resident memory,
and the SSH requests the *server* ran per poll interval. Everything it started is stopped at the end.
With ``--watch`` every trigger also has hang detection on (its log and one progress file, half of them
existing), and the time of one batched query for N jobs with and without the stat of their 2N paths
is reported too (median of 3).

With ``--paths`` it holds N remote-path waits instead (the campaign's: per run folder six checkpoint
waits, with their training's outcome markers, and four log waits; N/10 folders) alongside one job
trigger, first batched (the default: one command per interval for all) and then unbatched (each wait
its own SFTP calls), in the same run, and reports the server's SSH requests, the client's SFTP calls
and the CPU per interval of each, and their ratio.

    .venv/bin/python bench/bench_triggerer.py --counts 1,100,1000 --interval 5 --duration 30 [--watch]
    .venv/bin/python bench/bench_triggerer.py --paths --counts 10,100,1000 --interval 5 --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "plugins"), str(REPO / "src")]
# Airflow reads its home at import time; never touch ~/airflow from a benchmark.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="bench-airflow-"))

from slurm_operator.hooks.slurm import SlurmHook  # noqa: E402
from slurm_operator.hooks.slurm_async import AsyncSlurmHook  # noqa: E402
from slurm_operator.triggers.job_poller import SlurmPoller  # noqa: E402
from slurm_operator.triggers.remote_path import RemotePathTrigger  # noqa: E402
from slurm_operator.triggers.slurm_job import SlurmJobTrigger  # noqa: E402

from autoexp.campaign.triggerer.checkpoint_wait import PhaseCheckpointTrigger  # noqa: E402
from tests.fixtures import checkpoint_layouts  # noqa: E402
from tests.fixtures.slurm_cluster import start_cluster, stop_cluster  # noqa: E402
from tests.slurm_operator.integration.ssh_counter import CountingSshd, start_counting_sshd  # noqa: E402


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _watched(files: Path | None, job_id: str) -> dict[str, Any]:
    """Hang detection kwargs for one trigger: its log and a progress file (every other one exists)."""
    if files is None:
        return {}
    log, progress = files / f"job-{job_id}.out", files / f"progress-{job_id}"
    if int(job_id.rsplit("_", 1)[-1]) % 2:
        log.write_text("x\n")
        progress.write_text("1\n")
    return {"log_path": str(log), "progress_timeout": 3600.0, "progress_paths": [str(progress)]}


def _query_seconds(hook: SlurmHook, ids: list[str], paths: list[str]) -> float:
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        hook.job_states(ids, paths)
        times.append(time.monotonic() - t0)
    return round(statistics.median(times), 3)


async def _hold(
    sshd: CountingSshd, job_ids: list[str], interval: float, duration: float, files: Path | None
) -> dict[str, float | int]:
    """Run one trigger per job id for ``duration`` seconds; measure after one settling interval."""
    triggers = [
        SlurmJobTrigger(
            sshd.conn_id, job_id, poll_interval=interval, stream_logs=False, **_watched(files, job_id)
        )
        for job_id in job_ids
    ]
    tasks = [asyncio.create_task(anext(t.run())) for t in triggers]  # type: ignore[arg-type]
    await asyncio.sleep(interval * 1.5)  # every subscription in, first rounds done (connection opened)
    poller = SlurmPoller.for_conn(sshd.conn_id)
    rounds0, cpu0, wall0, t0 = poller.rounds, time.process_time(), time.monotonic(), time.time()
    await asyncio.sleep(duration)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    served = sshd.commands(t0, time.time())
    rounds = poller.rounds - rounds0
    rss = _rss_mb()
    done = sum(t.done() for t in tasks)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    intervals = wall / interval
    return {
        "triggers": len(job_ids),
        "cpu_percent_of_core": round(100 * cpu / wall, 2),
        "rss_mb": round(rss, 1),
        "server_commands": len(served),
        "server_commands_per_interval": round(len(served) / intervals, 2),
        "poll_rounds_per_interval": round(rounds / intervals, 2),
        "triggers_fired_early": done,
    }


def _path_waits(conn_id: str, root: Path, n: int, interval: float, batched: bool) -> list[Any]:
    """N waits over N/10 run folders (each: a checkpoint at 10, a log), as a campaign's phase has them."""
    waits: list[Any] = []
    for r in range((n + 9) // 10):
        run = root / f"run{r}"
        if not run.exists():
            checkpoint_layouts.legacy(run / "checkpoints", 10)
            (run / "train.log").write_text("iteration 10\n")
        markers = {f"{k}_path": str(run / "state" / f"train.{k}") for k in ("failed", "finished", "stopped")}
        common: dict[str, Any] = {"poll_interval": interval, "min_defer_seconds": 0}
        ckpt, log = str(run / "checkpoints"), str(run / "train.log")
        waits += [PhaseCheckpointTrigger(conn_id, ckpt, it, **markers, **common) for it in range(20, 80, 10)]
        waits += [RemotePathTrigger(conn_id, log, pattern=f"^eval {k} done", **common) for k in range(4)]
    for w in waits[:n]:
        w.batched = batched
    return waits[:n]


async def _hold_paths(
    sshd: CountingSshd, job_id: str, root: Path, n: int, interval: float, duration: float, batched: bool
) -> dict[str, Any]:
    """Hold N path waits and one job trigger for ``duration`` s; count per interval after settling."""
    sftp_calls = [0]
    original = AsyncSlurmHook._sftp

    async def counted(self: AsyncSlurmHook, path: str, fn: Any) -> Any:
        sftp_calls[0] += 1
        return await original(self, path, fn)

    AsyncSlurmHook._sftp = counted  # type: ignore[method-assign]
    waits = _path_waits(sshd.conn_id, root, n, interval, batched)
    job = SlurmJobTrigger(sshd.conn_id, job_id, poll_interval=interval, stream_logs=False)
    tasks = [asyncio.create_task(anext(t.run())) for t in [*waits, job]]  # type: ignore[arg-type]
    try:
        await asyncio.sleep(interval * 2)  # connection up, first rounds and follow-ups done
        calls0, cpu0, wall0, t0 = sftp_calls[0], time.process_time(), time.monotonic(), time.time()
        await asyncio.sleep(duration)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        served = sshd.commands(t0, time.time())
        calls = sftp_calls[0] - calls0
        fired = sum(t.done() for t in tasks)  # none should: nothing they wait for comes
        rss = _rss_mb()
    finally:
        AsyncSlurmHook._sftp = original  # type: ignore[method-assign]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    intervals = wall / interval
    path_cmds = sum("#path-batch" in c.text for c in served)
    return {
        "waits": n,
        "batched": batched,
        "server_requests_per_interval": round(len(served) / intervals, 2),
        "path_commands_per_interval": round(path_cmds / intervals, 2),
        "sftp_calls_per_interval": round(calls / intervals, 2),
        "ops_per_interval": round((len(served) + calls) / intervals, 2),
        "cpu_percent_of_core": round(100 * cpu / wall, 2),
        "rss_mb": rss,
        "waits_fired_early": fired,
    }


def _bench_paths(
    sshd: CountingSshd, job_id: str, counts: list[int], interval: float, duration: float
) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-path-waits-"))
    for n in counts:
        rows = [asyncio.run(_hold_paths(sshd, job_id, root, n, interval, duration, b)) for b in (True, False)]
        ratio = rows[1]["ops_per_interval"] / max(rows[0]["ops_per_interval"], 1e-9)
        for row in rows:
            print(json.dumps(row), flush=True)
        print(json.dumps({"waits": n, "ops_ratio_unbatched_over_batched": round(ratio, 1)}), flush=True)


def main() -> None:
    """Start a cluster, hold N triggers for each N, print one JSON line per N, stop everything."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,100,1000")
    ap.add_argument("--interval", type=float, default=5.0, help="poll interval of every trigger (s)")
    ap.add_argument("--duration", type=float, default=30.0, help="measured seconds per count")
    ap.add_argument("--watch", action="store_true", help="hang detection on for every trigger")
    ap.add_argument("--paths", action="store_true", help="path waits, batched against unbatched")
    args = ap.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    baseline = _rss_mb()
    cluster = start_cluster(prefix="bench-cluster-")
    sshd = start_counting_sshd(cluster, Path(tempfile.mkdtemp(prefix="bench-sshd-")))
    os.environ[sshd.conn_env_var] = sshd.conn_json
    hook = SlurmHook(sshd.conn_id)
    array = ""
    try:
        # One array of sleeping tasks: N distinct job ids ("A_0".."A_{N-1}") at the cost of one sbatch.
        array = hook.submit(
            script="#!/bin/bash\nsleep 900\n",
            sbatch_args=[
                f"--array=0-{1 if args.paths else max(counts) - 1}",
                "--job-name=bench-sleep",
                "--output=/dev/null",
            ],
        )
        print(json.dumps({"rss_mb_after_imports": round(baseline, 1), "array_job": array}), flush=True)
        if args.paths:
            _bench_paths(sshd, f"{array}_0", counts, args.interval, args.duration)
            return
        files = Path(tempfile.mkdtemp(prefix="bench-watched-")) if args.watch else None
        for n in counts:
            ids = [f"{array}_{i}" for i in range(n)]
            result = asyncio.run(_hold(sshd, ids, args.interval, args.duration, files))
            if files is not None:
                paths = [p for i in ids for p in (str(files / f"job-{i}.out"), str(files / f"progress-{i}"))]
                result["query_s_plain"] = _query_seconds(hook, ids, [])
                result["query_s_with_stat_of_2n_paths"] = _query_seconds(hook, ids, paths)
            print(json.dumps(result), flush=True)
    finally:
        if array:
            hook.cancel(array)
        hook.close()
        sshd.stop()
        stop_cluster(cluster)


if __name__ == "__main__":
    main()
