"""AutoExperiment's positional filters ``KEY=v1,v2``: keep the jobs whose variable matches."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from autoexp.config.errors import ConfigError
from autoexp.config.job import Job
from autoexp.config.substitute import close_matches


def parse_filters(texts: Sequence[str]) -> dict[str, list[str]]:
    """``["PHASE=PRETRAIN", "LR=0.01,0.001"]`` -> ``{"PHASE": ["PRETRAIN"], "LR": ["0.01", "0.001"]}``."""
    filters: dict[str, list[str]] = {}
    for text in texts:
        key, sep, values = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"<filter {text}>", 1, "", "a filter must look like KEY=VALUE[,VALUE...]")
        filters.setdefault(key.strip(), []).extend(values.split(","))
    return filters


def filter_jobs(jobs: Iterable[Job], filters: Mapping[str, Sequence[str]]) -> list[Job]:
    """The jobs whose ``str(params[KEY])`` is one of the values, for every KEY (AutoExperiment's rule).

    A KEY that no job defines is an error (AutoExperiment would silently keep nothing).
    """
    job_list = list(jobs)
    for key, values in filters.items():
        if job_list and not any(key in job.params for job in job_list):
            names = dict.fromkeys(k for job in job_list for k in job.params)
            raise ConfigError(
                f"<filter {key}={','.join(values)}>",
                1,
                key,
                f"no job has this variable{close_matches(key, names)}",
            )
    return [
        job
        for job in job_list
        if all(str(job.params.get(key)) in set(values) for key, values in filters.items())
    ]
