"""The installed Airflow's version: what every version-dependent import of the plugin is decided by."""

from __future__ import annotations

import airflow
from packaging.version import Version

AIRFLOW_VERSION = Version(Version(airflow.__version__).base_version)  # 3.3.2, not 3.3.2rc1
