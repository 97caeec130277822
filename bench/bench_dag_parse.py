"""Benchmark: DAG-file parse time for the seed's config (90 DAGs) and a 10x grid, vs. bare expansion.

Targets (issue 6): <= 0.5 s for the seed's 90 DAGs; <= 1.5x the config engine's bare expansion.
Run: .venv/bin/python bench/bench_dag_parse.py [CONFIG]
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "config" / "scaling_exps.yaml"


def best_of(fn: Callable[[], object], repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def tenfold(text: str) -> str:
    """The seed's grid with ten times the learning rates (900 experiments)."""
    lrs = ", ".join(f"{m}e-{e}" for e in range(2, 7) for m in (1, 2))
    return re.sub(r"^LR: \[.*\]$", f"LR: [{lrs}]", text, count=1, flags=re.MULTILINE)


def measure(path: Path, label: str) -> tuple[float, float, int]:
    from autoexp.config import expand, load_config
    from autoexp.experiment.factory import register

    bare = best_of(lambda: expand(load_config(path)))
    namespace: dict[str, object] = {}
    parse = best_of(lambda: register(namespace, [path]))
    dags = sum(1 for k in namespace if not k.startswith("broken_"))
    print(
        f"{label:<28} {dags:>5} DAGs  bare expansion {bare:7.3f} s  DAG file {parse:7.3f} s  "
        f"ratio {parse / bare:5.2f}x"
    )
    return bare, parse, dags


def main() -> int:
    seed = Path(sys.argv[1]) if len(sys.argv) > 1 else SEED
    start = time.perf_counter()
    import airflow.sdk  # noqa: F401  (every DAG file pays this; reported apart)

    import autoexp.experiment.factory  # noqa: F401

    print(
        f"imports (airflow.sdk, factory, Slurm layer): {time.perf_counter() - start:.2f} s, once per process"
    )
    bare, parse, _ = measure(seed, seed.name)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=seed.parent, prefix=".bench-") as big:
        big.write(tenfold(seed.read_text()))
        big.flush()
        measure(Path(big.name), "10x grid")
    ok = parse <= 0.5 and parse <= 1.5 * bare
    print("targets (<= 0.5 s and <= 1.5x for the seed):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
