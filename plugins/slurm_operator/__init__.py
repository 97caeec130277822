"""Generic Slurm-over-SSH for Airflow, in a provider's shape: model, remote protocol, hooks, policy,
triggers, operators, sensors."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """What Airflow's providers manager lists (entry point ``apache_airflow_provider``): provider.yaml,
    with the name of the distribution that ships this package, which the manager requires."""
    from importlib.metadata import packages_distributions
    from pathlib import Path

    import yaml

    info: dict[str, Any] = yaml.safe_load((Path(__file__).with_name("provider.yaml")).read_text())
    info["package-name"] = packages_distributions().get(__name__, [__name__])[0]
    return info
