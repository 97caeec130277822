"""Config file -> experiment plans and settings, through the expansion cache (no Airflow)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoexp.campaign.planning import cache
from autoexp.campaign.planning.checkout import ensure_default_env
from autoexp.campaign.planning.plan import ExperimentPlan, PlanError, plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings, SettingsError, parse_settings


def _as_mapping(raw: Any) -> Any:
    """The config's ``airflow:`` section as plain dicts and lists (OmegaConf nodes converted)."""
    if raw is None or isinstance(raw, Mapping):
        return raw
    from autoexp.config.yamlio import to_plain

    return to_plain(raw)


def load_plans(
    config_path: str | Path, overrides: Sequence[str] = ()
) -> tuple[list[ExperimentPlan], AirflowSettings]:
    """Load, expand and plan one config (through the expansion cache); raises ConfigError, SettingsError,
    PlanError or OSError."""
    ensure_default_env()
    path = Path(config_path).absolute()
    folder = cache.cache_dir()
    key = cache.cache_key(path.read_bytes(), overrides, path) if folder is not None else ""
    hit = cache.load(key, folder) if folder is not None else None
    if hit is not None:
        raw, slim_jobs = hit
        settings = parse_settings(raw, path)
        return plan_campaign(slim_jobs, settings), settings
    from autoexp.config import expand, load_config

    config = load_config(path, overrides)
    raw = _as_mapping(config.airflow)
    settings = parse_settings(raw, path)
    jobs = expand(config)
    plans = plan_campaign(jobs, settings)  # the full jobs: errors name the file and line
    if folder is not None:
        cache.store(key, folder, raw, cache.slim(jobs, settings))
    return plans, settings


def config_errors() -> tuple[type[Exception], ...]:
    """What a broken config raises. A cache hit never imports the config engine (20 ms of a fresh
    DAG processor's parse), so neither does this until an exception is matched."""
    from autoexp.config import ConfigError

    return (ConfigError, SettingsError, PlanError, OSError)
