"""Session-wide test set-up: isolated Airflow and Hugging Face homes, shared fixtures."""

from __future__ import annotations

import os
import tempfile

# Airflow and Hugging Face read their homes at import time, so these are set before any test
# module imports them. Each pytest session gets private folders: nothing touches ~/airflow or ~/.cache.
_SESSION_TMP = tempfile.mkdtemp(prefix="autoexp-tests-")
os.environ.setdefault("AIRFLOW_HOME", os.path.join(_SESSION_TMP, "airflow"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
os.environ.setdefault("HF_HOME", os.path.join(_SESSION_TMP, "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

pytest_plugins = ["tests.fixtures.slurm_cluster", "tests.fixtures.airflow_env"]
