"""Pure config engine: AutoExperiment YAML to expanded, validated jobs (no Airflow import)."""

from autoexp.config.errors import ConfigError
from autoexp.config.expand import expand, expand_with_axes, experiment_key
from autoexp.config.filters import filter_jobs, parse_filters
from autoexp.config.job import SPECIAL_KEYS, Job
from autoexp.config.loader import Config, load_config
from autoexp.config.render import check_job_name_line, render

__all__ = [
    "SPECIAL_KEYS",
    "Config",
    "ConfigError",
    "Job",
    "check_job_name_line",
    "expand",
    "expand_with_axes",
    "experiment_key",
    "filter_jobs",
    "load_config",
    "parse_filters",
    "render",
]
