"""What the tests reach in Airflow that moved between 3.1, 3.2 and 3.3, in one place.

The product's own version differences are in ``slurm_operator.airflow_internals`` and
``slurm_operator.airflow_public``; these are the tests' (serializing a DAG, a DagBag, the exception a
skip raises).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_operator.airflow_version import AIRFLOW_VERSION

try:  # Airflow 3.2+
    from airflow.serialization.serialized_objects import DagSerialization
except ImportError:  # Airflow 3.1
    from airflow.serialization.serialized_objects import (  # type: ignore[assignment,no-redef]
        SerializedDAG as DagSerialization,
    )

try:  # Airflow 3.2+ (3.1's name is a deprecated alias there: the same class)
    from airflow.sdk.exceptions import DownstreamTasksSkipped
except ImportError:  # Airflow 3.1
    from airflow.exceptions import DownstreamTasksSkipped  # type: ignore[attr-defined,no-redef,unused-ignore]

__all__ = ["AIRFLOW_VERSION", "DagSerialization", "DownstreamTasksSkipped", "dag_bag"]


def dag_bag(folder: Path) -> Any:
    """The DAGs of ``folder`` as the DAG processor loads a bundle (no database needed)."""
    try:  # Airflow 3.2+
        from airflow.dag_processing.dagbag import BundleDagBag
    except ImportError:  # Airflow 3.1: DagBag, which knows no bundle name
        from airflow.models.dagbag import DagBag

        return DagBag(dag_folder=folder, bundle_path=folder, include_examples=False)
    return BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
