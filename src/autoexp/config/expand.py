"""Expansion of a loaded config into AutoExperiment's jobs, in AutoExperiment's order."""

from __future__ import annotations

import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

from autoexp.config.errors import ConfigError
from autoexp.config.grid import expand_grid
from autoexp.config.job import DEFAULT_CHECK_INTERVAL_SECS, MANDATORY_KEYS, Job
from autoexp.config.loader import Config
from autoexp.config.substitute import SubstitutionError, resolve
from autoexp.config.yamlio import Scalar


def expand(config: Config) -> list[Job]:
    """Every job of the grid, first YAML key varying slowest. Raises ConfigError."""
    return expand_with_axes(config)[0]


def expand_with_axes(config: Config) -> tuple[list[Job], list[str]]:
    """The jobs, and the keys whose values are lists (the grid's axes) in document order."""
    file = config.display_path()
    points, axes = expand_grid(config.root, config.locate)
    jobs: list[Job] = []
    templates: dict[str, Path] = {}
    for index, (params, lines) in enumerate(points):
        _check_mandatory(params, file)
        try:
            resolve(params)
        except SubstitutionError as exc:
            where, line = config.locate(lines.get(exc.var, 1))
            raise ConfigError(where, line, exc.var, f"{exc.message} (job #{index + 1})") from None
        jobs.append(_make_job(config, file, index, params, lines, templates))
    _check_unique_names(jobs, file)
    return jobs, axes


def _make_job(
    config: Config,
    file: str,
    index: int,
    params: dict[str, Scalar],
    lines: dict[str, int],
    templates: dict[str, Path],
) -> Job:
    def text(key: str, default: str = "") -> str:
        value = params.get(key, default)
        if type(value) is not str:
            # AutoExperiment keeps the raw value; every consumer of these fields treats them as text.
            return str(value)
        return value

    interval: Any = params.get("check_interval_secs", DEFAULT_CHECK_INTERVAL_SECS)
    if type(interval) is float and interval > 0:
        interval = math.ceil(interval)  # AutoExperiment sleeps a float; whole seconds are enough here
    if type(interval) is not int or interval <= 0:
        raise ConfigError(
            *config.locate(lines.get("check_interval_secs", 1)),
            "check_interval_secs",
            f"must be a positive whole number of seconds, got {interval!r}",
        )
    template_value = text("template")
    template = templates.get(template_value)
    if template is None and template_value:
        template = templates.setdefault(template_value, (config.folder / template_value).resolve())
    return Job(
        name=text("name"),
        params=MappingProxyType(params),
        template=template,
        sbatch_script=text("sbatch_script"),
        output_file=text("output_file"),
        cmd=text("cmd"),
        check_interval_secs=interval,
        start_condition_cmd=text("start_condition_cmd"),
        termination_str=text("termination_str"),
        termination_cmd=text("termination_cmd"),
        index=index,
        config_path=config.path,
        lines=MappingProxyType(lines),
        source=file,
        overrides=config.overrides,
    )


def _check_mandatory(params: dict[str, Scalar], file: str) -> None:
    for key in MANDATORY_KEYS:
        if key not in params:
            raise ConfigError(
                file,
                1,
                key,
                "missing mandatory key "
                "(AutoExperiment needs name, template, output_file, cmd and sbatch_script)",
            )


def _check_unique_names(jobs: list[Job], file: str) -> None:
    first: dict[str, Job] = {}
    for job in jobs:
        other = first.setdefault(job.name, job)
        if other is job:
            continue
        count = sum(1 for j in jobs if j.name == job.name)
        differing = [
            f"{k} ({other.params.get(k)!r} vs {job.params.get(k)!r})"
            for k in dict.fromkeys([*other.params, *job.params])
            if other.params.get(k) != job.params.get(k)
        ]
        where, line = job.origin("name").rsplit(":", 1) if "name" in job.lines else (file, "1")
        raise ConfigError(
            where,
            int(line),
            "name",
            f"{count} jobs are named {job.name!r} (jobs #{other.index + 1} and #{job.index + 1}); "
            f"parameters that differ but are not in the name: {', '.join(differing[:6]) or 'none'}",
        )


def experiment_key(job: Job) -> str:
    """The experiment a job belongs to: its EXP_NAME (AutoExperiment's convention), else its own name."""
    value = job.params.get("EXP_NAME")
    return str(value) if value is not None else job.name
