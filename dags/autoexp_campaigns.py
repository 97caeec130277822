"""One Airflow DAG per experiment of every campaign config ($AUTOEXP_CONFIGS, default: config/*.yaml)."""

# Airflow's safe mode only parses files that mention both "airflow" and "dag": this line does.
from pathlib import Path

from autoexp.experiment.factory import config_paths, register

register(globals(), config_paths(Path(__file__).resolve().parent.parent / "config"))
