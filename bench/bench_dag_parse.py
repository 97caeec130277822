"""Benchmark: DAG-file parse time for the seed's config (90 DAGs) and a 10x grid, vs. bare expansion.

Targets (issue 6): <= 0.5 s for the seed's 90 DAGs; <= 1.5x the config engine's bare expansion.
Reported apart: the one-time imports (airflow.sdk, the Slurm layer), paid once per parsing process;
a cold parse (first parse of a config: expansion + planning + DAGs, writes the expansion cache);
a warm parse (what the DAG processor does every 30 s afterwards: cache hit + DAGs). Cold and warm are
the best of three in this process; the DAG processor parses each time in a fresh child process, so the
first parse of a fresh process (after the imports, cold and warm) is reported too.
Run: .venv/bin/python bench/bench_dag_parse.py [CONFIG]
"""

from __future__ import annotations

import os
import re
import subprocess
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
    """The seed's grid with ten times the learning rates: 50 instead of 5 (900 experiments)."""
    lrs = ", ".join([f"{m}e-{e}" for e in range(2, 8) for m in range(1, 10)][:50])
    out, n = re.subn(r"^LR: \[[^\]]*\]", f"LR: [{lrs}]", text, count=1, flags=re.MULTILINE)
    if n != 1:
        raise SystemExit("bench: no `LR: [...]` line to widen in the config")
    return out


def measure(path: Path, label: str, cache: Path) -> tuple[float, float, float]:
    from autoexp.campaign.dags.factory import register
    from autoexp.config import expand, load_config

    def cold() -> None:
        os.environ["AUTOEXP_CACHE_DIR"] = "off"
        register({}, [path])

    def warm() -> None:
        register({}, [path])

    bare = best_of(lambda: expand(load_config(path)))
    cold_s = best_of(cold)
    os.environ["AUTOEXP_CACHE_DIR"] = str(cache)
    register({}, [path])  # fills the cache
    warm_s = best_of(warm)
    namespace: dict[str, object] = {}
    register(namespace, [path])
    dags = sum(1 for k in namespace if not k.startswith("broken_"))
    print(
        f"{label:<20} {dags:>4} DAGs  bare expansion {bare:6.3f} s  cold parse {cold_s:6.3f} s "
        f"({cold_s / bare:4.2f}x)  warm parse {warm_s:6.3f} s ({warm_s / bare:4.2f}x)"
    )
    return bare, cold_s, warm_s


_FIRST_PARSE = """
import sys, time
from pathlib import Path
import airflow.sdk
from autoexp.campaign.dags.factory import register
start = time.perf_counter()
register({}, [Path(sys.argv[1])])
print(time.perf_counter() - start)
"""


def first_parse(path: Path, cache: str) -> float:
    """Seconds of the first parse in a fresh process, imports excluded (AUTOEXP_CACHE_DIR=cache)."""
    env = {**os.environ, "AUTOEXP_CACHE_DIR": cache}
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_PARSE, str(path)], env=env, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    seed = Path(sys.argv[1]) if len(sys.argv) > 1 else SEED
    start = time.perf_counter()
    import airflow.sdk  # noqa: F401  (every DAG file pays this; reported apart)

    import autoexp.campaign.dags.factory  # noqa: F401

    took = time.perf_counter() - start
    print(f"imports (airflow.sdk, factory, Slurm layer): {took:.2f} s, once per process")
    with tempfile.TemporaryDirectory(prefix="autoexp-bench-cache-") as cache:
        bare, _, warm = measure(seed, seed.name, Path(cache))
        cold1, warm1 = first_parse(seed, "off"), first_parse(seed, cache)
        print(f"{'':<20} first parse in a fresh process: cold {cold1:6.3f} s  warm {warm1:6.3f} s")
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=seed.parent, prefix=".bench-") as big:
            big.write(tenfold(seed.read_text()))
            big.flush()
            measure(Path(big.name), "10x grid", Path(cache))
    ok = warm <= 0.5 and warm <= 1.5 * bare
    print("targets (warm parse of the seed <= 0.5 s and <= 1.5x bare):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
