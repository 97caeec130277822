"""Benchmark: expansion speed of the shipped config and of a generated 10,000-job config (jobs per second)."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from autoexp.config import expand, load_config

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "config" / "scaling_exps.yaml"
TARGET_SHIPPED_S = 0.3

GENERATED = """\
cmd: "sbatch {sbatch_script}"
template: t.sbatch
sbatch_script: "scripts/{name}.sbatch"
output_file: "{LOGS}/{name}/slurm.out"
LOGS: /scratch/logs
MODEL:
%s
LR: [1e-4, 2e-4, 3e-4, 5e-4, 1e-3, 2e-3, 3e-3, 5e-3, 1e-2, 2e-2]
MBS: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
SEED: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
GBS: "expr({MBS} * {NODES} * 4)"
NODES: 2
TOKENS: 2_000_000_000
ITERS: "expr(({TOKENS} + 2048 * {GBS} - 1) // (2048 * {GBS}))"
WARMUP: "expr(min(2 * 12 * {HIDDEN}**2 * {LAYERS} // (2048 * {GBS}), 5000))"
WD: "expr(1e-4 / {LR})"
EXP: "{MODEL}_lr{LR}_bs{MBS}_wd{WD}_w{WARMUP}"
name: "{EXP}_s{SEED}"
"""


def timed(path: Path, repeats: int) -> tuple[int, float, float]:
    """Jobs, best wall seconds and best CPU seconds of load + expand (CPU time is what a busy
    machine, shared with other processes, cannot inflate)."""
    best_wall = best_cpu = float("inf")
    count = 0
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        count = len(expand(load_config(path)))
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return count, best_wall, best_cpu


def report(label: str, count: int, wall: float, cpu: float) -> None:
    print(f"{label}: {count} jobs in {wall:.3f} s wall, {cpu:.3f} s CPU ({count / wall:,.0f} jobs/s)")


def main() -> int:
    count, seconds, cpu = timed(SHIPPED, 5)
    report("shipped config", count, seconds, cpu)
    verdict = "met" if seconds < TARGET_SHIPPED_S else "MISSED (is the machine busy? see `uptime`)"
    print(f"  target < {TARGET_SHIPPED_S} s wall: {verdict}")
    models = "\n".join(f"  - m{i}: {{HIDDEN: {128 * (i + 1)}, LAYERS: {4 + i}}}" for i in range(10))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "generated.yaml"
        path.write_text(GENERATED % models)
        report("generated config", *timed(path, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
