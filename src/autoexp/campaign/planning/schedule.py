"""What the `airflow:` keys `schedule` and `start_date` accept, and the schedule a DAG is given."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from croniter import croniter  # type: ignore[import-untyped]  # Airflow's own cron parser; no stubs

# An ISO 8601 duration (``PT6H``, ``P1D``): a run every so long rather than at cron times.
_DURATION = re.compile(r"^P(?=\d|T\d)(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+S)?)?$")
_PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")


def checked(value: str | None) -> str | None:
    """A cron expression, a preset, an ISO 8601 duration or None, unchanged; else ValueError.

    Checked at load: Airflow reads a cron expression only when it schedules, and a bad one would
    then fail the whole DAG file instead of naming the config's line.
    """
    if value is None or value in _PRESETS or _DURATION.match(value):
        return value
    if value[:1] in "@P" or not croniter.is_valid(value):
        raise ValueError(value)
    return value


def iso_date(value: str | date) -> str:
    """YAML's own date (``2026-01-01`` unquoted; a datetime is a date too) or an ISO string, as ISO."""
    if isinstance(value, date):
        return value.isoformat()
    datetime.fromisoformat(value)  # ValueError: not a date
    return value


def dag_schedule(value: str | None) -> str | timedelta | None:
    """A checked schedule as Airflow takes it: an ISO 8601 duration becomes a timedelta."""
    m = _DURATION.match(value) if value is not None else None
    if m is None:
        return value
    days, hours, minutes, seconds = (int(g[:-1]) if g else 0 for g in m.group(1, 3, 4, 5))
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
