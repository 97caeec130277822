"""Benchmark: the whole DagBag of dags/ in a fresh process (what a DAG processor pays), seed vs. a 10x grid.

Targets (issue 17), measured side by side in one run:
- the 900-experiment grid (the seed with 50 learning rates) loads; its cold parse <= 10x the seed's;
- its warm parse (expansion cache filled) <= 1.5x a bare Airflow DagBag of as many DAGs with as many
  plain tasks (EmptyOperator chains);
- the expansion cache stays small.
Each figure is the best of three fresh processes; imports of Airflow itself are excluded (the DAG
processor has them), ours are included. Run: .venv/bin/python bench/bench_dag_parse.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as `python bench/bench_dag_parse.py`

from tests.fixtures.seed_grid import SEED, write_grid  # noqa: E402

_BAG = """
import sys, time
import airflow.sdk
from airflow.dag_processing.dagbag import BundleDagBag
start = time.perf_counter()
bag = BundleDagBag(dag_folder=sys.argv[1], bundle_path=sys.argv[1], bundle_name="bench")
took = time.perf_counter() - start
assert not bag.import_errors, bag.import_errors
print(took, len(bag.dags), sum(len(d.tasks) for d in bag.dags.values()))
"""

_BARE = '''"""Bare airflow DAGs: EmptyOperator chains."""
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, chain

for i in range({dags}):
    with DAG(dag_id=f"bare_{{i}}", schedule=None) as dag:
        chain(*[EmptyOperator(task_id=f"t{{j}}") for j in range({per_dag} + (i < {extra}))])
    globals()[dag.dag_id] = dag
'''


def bag(folder: Path, env: dict[str, str]) -> tuple[float, int, int]:
    """(seconds, DAGs, tasks) of one DagBag of ``folder`` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _BAG, str(folder)],
        env={**os.environ, "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "900", **env},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[-3:]
    return float(out[0]), int(out[1]), int(out[2])


def best(folder: Path, env: dict[str, str], repeat: int = 3) -> tuple[float, int, int]:
    runs = [bag(folder, env) for _ in range(repeat)]
    return min(runs)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="autoexp-bench-") as tmp:
        base = Path(tmp)
        rows = []
        for label, config in (("seed (5 LRs)", SEED), ("10x grid (50 LRs)", write_grid(base, 50))):
            cache = base / f"cache-{len(rows)}"
            env = {"AUTOEXP_CONFIGS": str(config), "AUTOEXP_CACHE_DIR": str(cache)}
            cold = min(
                bag(REPO / "dags", {**env, "AUTOEXP_CACHE_DIR": str(base / f"cold-{i}-{len(rows)}")})
                for i in range(3)
            )
            bag(REPO / "dags", env)  # fills the cache
            warm = best(REPO / "dags", env)
            size = sum(f.stat().st_size for f in cache.iterdir())
            dags, tasks = warm[1], warm[2]
            bare_dir = base / f"bare-{len(rows)}"
            bare_dir.mkdir()
            (bare_dir / "bare.py").write_text(
                _BARE.format(dags=dags, per_dag=tasks // dags, extra=tasks % dags)
            )
            bare = best(bare_dir, {})
            assert bare[1:] == (dags, tasks), bare
            rows.append((label, dags, tasks, cold[0], warm[0], bare[0], size))
        print(
            f"{'config':<18} {'DAGs':>5} {'tasks':>6} {'cold s':>7} {'warm s':>7} {'bare s':>7} "
            f"{'warm/bare':>9} {'cold/seed':>9} {'cache KB':>8}"
        )
        seed_cold = rows[0][3]
        for label, dags, tasks, cold_s, warm_s, bare_s, size in rows:
            print(
                f"{label:<18} {dags:>5} {tasks:>6} {cold_s:>7.2f} {warm_s:>7.2f} {bare_s:>7.2f} "
                f"{warm_s / bare_s:>8.2f}x {cold_s / seed_cold:>8.2f}x {size / 1024:>8.0f}"
            )
        grid = rows[1]
        ok = grid[3] <= 10 * seed_cold and grid[4] <= 1.5 * grid[5]
        print("targets (10x grid: cold <= 10x the seed's, warm <= 1.5x bare):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
