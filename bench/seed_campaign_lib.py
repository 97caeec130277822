"""Pieces of bench/bench_seed_campaign.py: the seed config made local, process sampling, sacct figures.

Kept apart from the driver so that each stays short; nothing here starts a process.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from dispatch_latency import percentile

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning import dag_plan
from autoexp.campaign.planning.dag_plan import DagPlan
from autoexp.config.overrides import apply_overrides
from autoexp.config.yamlio import YMap, parse_yaml, to_plain
from tests.fixtures.procs import group_tree
from tests.fixtures.seed_grid import SEED, relocated

REPO = Path(__file__).resolve().parents[1]

# The seed's token budgets divided by ~1526: pretrain 1,310,720 tokens (40 / 10 / 5 iterations at micro
# batch 4 / 16 / 32 with the seed's 4 GPUs x micro batch global batch), cooldowns 65,536..1,310,720.
SCALE_OVERRIDES = (
    "TOTAL_TOKENS_NUM=1310720",
    "SAVE_INTERVAL=20",
    "PHASE.COOLDOWN.CD_SCALE.100M.TOTAL_TOKENS_THIS_PHASE=65536",
    "PHASE.COOLDOWN.CD_SCALE.200M.TOTAL_TOKENS_THIS_PHASE=131072",
    "PHASE.COOLDOWN.CD_SCALE.400M.TOTAL_TOKENS_THIS_PHASE=262144",
    "PHASE.COOLDOWN.CD_SCALE.1B.TOTAL_TOKENS_THIS_PHASE=655360",
    "PHASE.COOLDOWN.CD_SCALE.2B.TOTAL_TOKENS_THIS_PHASE=1310720",
)


def local_overrides(
    base: Path, trainer: Path, convert: Path, conn_id: str, pool: str, poll: float
) -> list[str]:
    """The seed on this machine: no GPU or container, paths under ``base``, the stand-ins, the counted SSH.

    NUM_GPUS stays the seed's 4 (only the Slurm request drops to 0 GPUs): the batch math, hence the
    iteration counts and the grid's names, are the seed's.
    """
    airflow = {
        "ssh_conn_id": conn_id,
        "pool": pool,
        "poll_interval_secs": poll,
        "checkpoint_settle_secs": 2,
        "retries": 1,
        "retry_delay_secs": 10,
        "paused": False,
    }
    flow = json.dumps(airflow)  # a YAML flow mapping
    out = [
        "GPUS_PER_NODE=0",
        "NUM_GPUS=4",
        "CPUS_PER_TASK=1",
        "CONVERT_GPUS_PER_NODE=0",
        "CONVERT_CPUS_PER_TASK=1",
        "TIME=15",
        "CONVERT_TIME=15",
        f"LOGS={base / 'runs'}",
        f"SBATCH_DIR={base / 'sbatch'}",
        "CONTAINER_RUNTIME=none",
        'CONTAINER_IMAGE=""',
        f"PYTHON={REPO / '.venv/bin/python'}",
        f"TRAIN_SCRIPT={trainer}",
        f"airflow={flow}",
    ]
    for phase in ("PRETRAIN", "COOLDOWN"):
        out.append(f"PHASE.{phase}.MODE.CONVERT_EVAL.template={convert}")
    return out


def write_config(path: Path, overrides: list[str]) -> Path:
    """The seed (templates pinned to its folder) with ``overrides`` applied by the config layer, as YAML."""
    root = parse_yaml(relocated(SEED.read_text(), SEED), str(SEED))
    assert isinstance(root, YMap)
    apply_overrides(root, overrides)
    path.write_text(yaml.safe_dump(to_plain(root), sort_keys=False, width=1000))
    return path


def expected_jobs(config: Path) -> dict[str, set[str]]:
    """DAG id -> the Slurm job names its run must submit (one per training and per checkpoint)."""
    plans, settings = load_plans(config, ())
    out: dict[str, set[str]] = {}
    for plan in plans:
        dag: DagPlan = dag_plan.plan_dag(plan, settings)
        names = set()
        for phase in dag.phases:
            names.add(phase.train.job_name)
            if phase.checkpoints is not None:
                names |= {str(i["job_name"]) for i in phase.checkpoints.instances}
        out[plan.dag_id] = names
    return out


def final_converts(config: Path, dag_ids: set[str]) -> list[tuple[str, str]]:
    """(training job, conversion job of its last checkpoint) per phase: the one dependency that follows
    a job's end (the trainer writes its last checkpoint, then exits)."""
    plans, settings = load_plans(config, ())
    pairs = []
    for plan in plans:
        if plan.dag_id not in dag_ids:
            continue
        for phase in dag_plan.plan_dag(plan, settings).phases:
            if phase.checkpoints is not None and phase.checkpoints.instances:
                last = max(phase.checkpoints.instances, key=lambda i: int(i["iteration"]))
                pairs.append((phase.train.job_name, str(last["job_name"])))
    return pairs


def _stat(pid: int) -> tuple[float, int] | None:
    """(utime + stime in seconds, RSS bytes) of one process, None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, int(fields[21]) * os.sysconf("SC_PAGE_SIZE")


@dataclass
class TreeSampler:
    """CPU seconds and peak RSS of a process tree, sampled: a process's CPU counts as last seen."""

    root: int
    cpu: dict[int, float] = field(default_factory=dict)
    peak_rss: int = 0

    def sample(self) -> None:
        rss = 0
        for pid in group_tree(self.root) | {self.root}:
            got = _stat(pid)
            if got is not None:
                self.cpu[pid] = got[0]
                rss += got[1]
        self.peak_rss = max(self.peak_rss, rss)

    def figures(self, wall: float) -> dict[str, float]:
        cpu = sum(self.cpu.values())
        return {
            "cpu_s": round(cpu, 1),
            "cpu_percent_of_core": round(100 * cpu / wall, 1),
            "peak_rss_mb": round(self.peak_rss / 2**20, 1),
            "processes_seen": len(self.cpu),
        }


SACCT_FIELDS = "JobID,JobName,State,Submit,Start,End"


def sacct(env: dict[str, str], since: float) -> list[dict[str, Any]]:
    """Every job (allocations only) submitted since ``since``, with epoch Submit/Start/End (None: unknown)."""
    start = datetime.fromtimestamp(since - 60).strftime("%Y-%m-%dT%H:%M:%S")
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-o", SACCT_FIELDS, "-S", start],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=120,
    ).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) != 6:
            continue
        row: dict[str, Any] = dict(zip(("id", "name", "state"), parts[:3], strict=True))
        for key, stamp in zip(("submit", "start", "end"), parts[3:], strict=True):
            try:
                row[key] = datetime.fromisoformat(stamp).timestamp()
            except ValueError:
                row[key] = None
        rows.append(row)
    return rows


def latency_figures(rows: list[dict[str, Any]], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Seconds from a training's sacct End to its last conversion's first sacct Submit."""
    first_submit: dict[str, float] = {}
    end: dict[str, float] = {}
    for row in rows:
        if row["submit"] is not None:
            first_submit[row["name"]] = min(first_submit.get(row["name"], row["submit"]), row["submit"])
        if row["end"] is not None and row["state"].startswith("COMPLETED"):
            end[row["name"]] = row["end"]
    lat = [first_submit[c] - end[t] for t, c in pairs if t in end and c in first_submit]
    if not lat:
        return {"pairs": 0}
    return {
        "pairs": len(lat),
        "median_s": round(statistics.median(lat), 1),
        "p95_s": round(percentile(lat, 0.95), 1),
        "max_s": round(max(lat), 1),
    }


def wait_for(what: str, check: Any, timeout: float, every: float = 5.0) -> Any:
    """Call ``check`` until it returns a value; raise one line naming what was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}; see the stack's logs in the bench folder")
        time.sleep(every)


_WORKLOAD = re.compile(r"Workload finished .*?duration=([0-9.]+) .*?final_state=(\w+)")


def workload_figures(scheduler_log: Path) -> dict[str, Any]:
    """Task processes the LocalExecutor ran (each parses the DAG file, then runs or defers): how many,
    how long (median, p95), by final state."""
    found = _WORKLOAD.findall(scheduler_log.read_text(errors="replace")) if scheduler_log.exists() else []
    seconds = [float(d) for d, _ in found]
    if not seconds:
        return {"count": 0}
    return {
        "count": len(seconds),
        "median_s": round(statistics.median(seconds), 1),
        "p95_s": round(percentile(seconds, 0.95), 1),
        "by_final_state": dict(Counter(state for _, state in found)),
    }
