"""What a campaign DAG file (dags/autoexp_campaigns_<n>.py) runs: build its share of $AUTOEXP_CONFIGS."""

from __future__ import annotations

from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from autoexp.campaign.configs.config_set import configs_of_file
from autoexp.campaign.configs.config_source import config_paths


def register_file(namespace: MutableMapping[str, Any], dag_file: str) -> list[str]:
    """Register the DAGs of the configs this DAG file builds (config_set.py says which).

    A file with no config left imports nothing of Airflow's: the DAG processor parses every file of
    the folder every 30 s.
    """
    path = Path(dag_file).resolve()
    configs = config_paths(path.parent.parent / "config")
    mine = configs_of_file(path, configs)
    if not mine:
        return []
    from autoexp.campaign.dags.factory import register

    return register(namespace, mine, earlier=configs[: configs.index(mine[0])])
