"""One Airflow DAG per experiment of every campaign config ($AUTOEXP_CONFIGS, default: config/*.yaml)."""

# Airflow's safe mode only parses files that mention both "airflow" and "dag": this line does.
from pathlib import Path

from autoexp.campaign.dags.factory import register
from autoexp.campaign.planning.config_source import config_paths

register(globals(), config_paths(Path(__file__).resolve().parent.parent / "config"))
