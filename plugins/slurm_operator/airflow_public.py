"""Public Airflow names that moved in 3.2, imported from where the installed version has them.

3.2 made ``conf`` an ``airflow.sdk`` name and moved the exceptions a task raises to
``airflow.sdk.exceptions``; 3.1 has them in its core. Private API is ``airflow_internals``'s; the
version both decide by, ``airflow_version``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

from slurm_operator.airflow_version import AIRFLOW_VERSION

if TYPE_CHECKING or Version("3.2") <= AIRFLOW_VERSION:  # mypy reads this branch
    from airflow.sdk import conf
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        TaskDeferralTimeout,
    )
else:  # 3.1: the core's config, and the exceptions its task runner catches
    from airflow.configuration import conf
    from airflow.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        TaskDeferralTimeout,
    )

__all__ = [
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "TaskDeferralTimeout",
    "conf",
]
