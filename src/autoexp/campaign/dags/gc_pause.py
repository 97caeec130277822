"""Cyclic garbage collection paused while a config's DAGs are built."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the DAGs are built.

    Building the 2,100 operators of config/scaling_exps.yaml allocates enough objects to trigger
    full collections, each of which walks every object of the process (Airflow's modules included):
    more than a third of a parse (bench/bench_dag_parse.py measures it). What is built stays alive
    anyway; the little cyclic garbage is collected after the parse.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
