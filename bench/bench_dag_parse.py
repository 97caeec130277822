"""Benchmark: the whole DagBag of dags/ in a fresh process (what a DAG processor pays), seed vs. a 10x grid.

Targets (issue 17), measured side by side in one run:
- the 900-experiment grid (the seed with 50 learning rates) loads; its cold parse <= 10x the seed's;
- its warm parse (expansion cache filled) <= 1.5x a bare Airflow DagBag of as many DAGs with as many
  plain tasks (EmptyOperator chains);
- beside them, the same DAGs built by the factory with an EmptyOperator for each of our operators
  ("shape": the same planning, task groups, mapped groups, edges and DAG arguments): what Airflow's
  objects for this shape cost, so warm - shape is what our operators add;
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
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as `python bench/bench_dag_parse.py`

from tests.fixtures.seed_grid import SEED, write_grid  # noqa: E402

# A DAG processor's child parses the file, then serializes each DAG for its parent (processor.py's
# _serialize_dags): both are timed, and the serialized DAGs' JSON is measured.
_BAG = """
import json, sys, time
import airflow.sdk
from airflow.dag_processing.dagbag import BundleDagBag
from airflow.serialization.serialized_objects import DagSerialization
start = time.perf_counter()
bag = BundleDagBag(dag_folder=sys.argv[1], bundle_path=sys.argv[1], bundle_name="bench")
took = time.perf_counter() - start
assert not bag.import_errors, bag.import_errors
start = time.perf_counter()
data = [DagSerialization.to_dict(dag) for dag in bag.dags.values()]
serialized = time.perf_counter() - start
size = sum(len(json.dumps(d)) for d in data)
print(took, len(bag.dags), sum(len(d.tasks) for d in bag.dags.values()), serialized, size)
"""

_BARE = '''"""Bare airflow DAGs: EmptyOperator chains."""
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, chain

for i in range({dags}):
    with DAG(dag_id=f"bare_{{i}}", schedule=None) as dag:
        chain(*[EmptyOperator(task_id=f"t{{j}}") for j in range({per_dag} + (i < {extra}))])
    globals()[dag.dag_id] = dag
'''


# The factory's DAGs with an EmptyOperator (given only BaseOperator's arguments) for each of ours.
_SHAPE = """
from airflow.providers.standard.operators.empty import EmptyOperator
from autoexp.campaign.dags import factory
from autoexp.campaign.dags.dag_files import register_file

_BASE = ("task_id", "priority_weight", "map_index_template", "pool", "trigger_rule", "outlets")


def _empty(**kwargs):
    return EmptyOperator(**{k: v for k, v in kwargs.items() if k in _BASE})


for name in ("CampaignSlurmOperator", "CheckpointWait", "StageOperator", "ReportOperator"):
    setattr(factory, name, _empty)
register_file(globals(), __file__)
"""


class Bag(NamedTuple):
    parse: float  # seconds
    dags: int
    tasks: int
    serialize: float  # seconds
    size: int  # bytes of the serialized DAGs' JSON


def bag(folder: Path, env: dict[str, str]) -> Bag:
    """One DagBag of ``folder`` in a fresh process, then its DAGs serialized."""
    out = subprocess.run(
        [sys.executable, "-c", _BAG, str(folder)],
        env={**os.environ, "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "900", **env},
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[-5:]
    return Bag(float(out[0]), int(out[1]), int(out[2]), float(out[3]), int(out[4]))


def best(folder: Path, env: dict[str, str], repeat: int = 3) -> Bag:
    """The fastest parse and the fastest serialization of ``repeat`` fresh processes."""
    runs = [bag(folder, env) for _ in range(repeat)]
    return min(runs)._replace(serialize=min(r.serialize for r in runs))


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="autoexp-bench-") as tmp:
        base = Path(tmp)
        rows: list[tuple[str, int, int, float, Bag, Bag, Bag, int]] = []
        for label, config in (("seed (5 LRs)", SEED), ("10x grid (50 LRs)", write_grid(base, 50))):
            cache = base / f"cache-{len(rows)}"
            env = {"AUTOEXP_CONFIGS": str(config), "AUTOEXP_CACHE_DIR": str(cache)}
            cold = min(
                bag(REPO / "dags", {**env, "AUTOEXP_CACHE_DIR": str(base / f"cold-{i}-{len(rows)}")}).parse
                for i in range(3)
            )
            bag(REPO / "dags", env)  # fills the cache
            warm = best(REPO / "dags", env)
            size = sum(f.stat().st_size for f in cache.iterdir())
            dags, tasks = warm.dags, warm.tasks
            bare_dir = base / f"bare-{len(rows)}"
            bare_dir.mkdir()
            (bare_dir / "bare.py").write_text(
                _BARE.format(dags=dags, per_dag=tasks // dags, extra=tasks % dags)
            )
            bare = best(bare_dir, {})
            assert (bare.dags, bare.tasks) == (dags, tasks), bare
            shape_dir = base / f"shape-{len(rows)}"
            shape_dir.mkdir()
            (shape_dir / "autoexp_campaigns_0.py").write_text(_SHAPE)
            shape = best(shape_dir, env)
            assert (shape.dags, shape.tasks) == (dags, tasks), shape
            rows.append((label, dags, tasks, cold, warm, bare, shape, size))
        print(
            f"{'config':<18} {'DAGs':>5} {'tasks':>6} {'cold s':>7} {'warm s':>7} {'bare s':>7} "
            f"{'shape s':>7} {'warm/bare':>9} {'shape/bare':>10} {'cold/seed':>9} {'cache KB':>8}"
        )
        seed_cold = rows[0][3]
        for label, dags, tasks, cold_s, warm, bare, shape, size in rows:
            print(
                f"{label:<18} {dags:>5} {tasks:>6} {cold_s:>7.2f} {warm.parse:>7.2f} {bare.parse:>7.2f} "
                f"{shape.parse:>7.2f} {warm.parse / bare.parse:>8.2f}x {shape.parse / bare.parse:>9.2f}x "
                f"{cold_s / seed_cold:>8.2f}x {size / 1024:>8.0f}"
            )
        print("serialization after the parse (the DAG processor's child does both), warm / bare / shape:")
        for label, dags, _, _, warm, bare, shape, _ in rows:
            print(
                f"{label:<18} seconds {warm.serialize:.2f} / {bare.serialize:.2f} / {shape.serialize:.2f}"
                f" ({warm.serialize / bare.serialize:.2f}x bare);"
                f" KB per DAG {warm.size / dags / 1024:.1f} / {bare.size / dags / 1024:.1f}"
                f" / {shape.size / dags / 1024:.1f}"
            )
        grid = rows[1]
        ok = grid[3] <= 10 * seed_cold and grid[4].parse <= 1.5 * grid[5].parse
        print("targets (10x grid: cold <= 10x the seed's, warm <= 1.5x bare):", "met" if ok else "NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
