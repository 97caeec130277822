"""Which DAG file builds which config, and which DAG ids the configs before it already build.

Airflow imports each DAG file in its own process under its own timeout (``[core]
dagbag_import_timeout``): configs built by one file share one fate, a slow config's timeout is an
import error for every DAG of the file. So ``dags/`` holds several identical DAG files,
``autoexp_campaigns_<n>.py``: the n-th in number order builds the n-th config of ``$AUTOEXP_CONFIGS``,
and the last one also builds every config beyond the number of files (add a copy to isolate more).
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

DAG_FILE_PREFIX = "autoexp_campaigns_"
_DAG_FILE = re.compile(rf"{DAG_FILE_PREFIX}(\d+)\.py")
_MAX_WAIT_SECS = 5.0


def configs_of_file(dag_file: Path, configs: Sequence[Path]) -> list[Path]:
    """The configs the DAG file ``dag_file`` builds, among ``configs`` (in $AUTOEXP_CONFIGS order)."""
    own = _DAG_FILE.fullmatch(dag_file.name)
    if own is None:
        raise ValueError(f"{dag_file}: a campaign DAG file is named {DAG_FILE_PREFIX}<number>.py")
    siblings = (_DAG_FILE.fullmatch(f.name) for f in dag_file.parent.glob(f"{DAG_FILE_PREFIX}*.py"))
    numbers = sorted(int(m.group(1)) for m in siblings if m)
    position = numbers.index(int(own.group(1)))
    if position == len(numbers) - 1:
        return list(configs[position:])
    return list(configs[position : position + 1])


def claimed_ids(config: Path, wait_secs: float) -> dict[str, str] | None:
    """{DAG id: experiment} of another config, or None when not known within ``wait_secs``.

    Read from the id list its own DAG file's parse left in the cache. Before that parse (a fresh
    cache, an edited config), it is planned here in a thread waited on for at most ``wait_secs``:
    the DAG files parse in any order, and a slow or hung config must not cost another file's import.
    """
    from autoexp.campaign.configs import cache  # only files with a config pay for its imports

    known = cache.load_ids(config, cache.cache_dir())
    if known is not None:
        return known
    from autoexp.campaign.configs.planned_config import load_plans
    from autoexp.campaign.planning.plan import config_errors

    found: dict[str, dict[str, str]] = {}

    def plan() -> None:
        try:
            plans, _ = load_plans(config)  # writes the id list for the next parses
        except config_errors():  # its own file reports it
            return
        found["ids"] = {plan.dag_id: plan.name for plan in plans}

    thread = threading.Thread(target=plan, name=f"autoexp-ids-{config.name}", daemon=True)
    thread.start()
    thread.join(wait_secs)
    return found.get("ids")


def _wait_budget() -> float:
    """Seconds this file may wait for other configs' ids: a quarter of what is left of Airflow's
    import timeout for it (its SIGALRM timer), at most _MAX_WAIT_SECS."""
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    return min(_MAX_WAIT_SECS, left / 4) if left > 0 else _MAX_WAIT_SECS


def clashes(own: Mapping[str, str], earlier: Sequence[Path]) -> dict[str, tuple[Path, str]]:
    """The DAG ids of ``own`` ({id: experiment}) that a config listed before builds: {id: (config, its
    experiment)}. The first config listed keeps a DAG id."""
    found: dict[str, tuple[Path, str]] = {}
    deadline = time.monotonic() + _wait_budget()
    for other in earlier:
        for dag_id, experiment in (claimed_ids(other, max(0.0, deadline - time.monotonic())) or {}).items():
            if dag_id in own and dag_id not in found:
                found[dag_id] = (other, experiment)
    return found


def clash_message(config: Path, own: Mapping[str, str], found: Mapping[str, tuple[Path, str]]) -> str:
    """One line: the first clash by name (both files, both experiments), and how many more."""
    dag_id = sorted(found)[0]
    other, experiment = found[dag_id]
    more = f" ({len(found) - 1} more DAG ids clash likewise)" if len(found) > 1 else ""
    return (
        f"{config}: experiment {own[dag_id]!r} gives DAG id {dag_id!r}, which {other} already builds "
        f"(experiment {experiment!r}); it is built from {other} only{more}. Rename the experiment or set "
        "airflow.dag_id_prefix in one of the two configs"
    )
