"""What the `schedule` key accepts and the schedule a DAG is given."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

import pytest

from autoexp.campaign.planning import schedule
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.plan import plan_campaign
from autoexp.campaign.planning.schedule import dag_schedule
from autoexp.campaign.planning.settings import AirflowSettings
from tests.autoexp.campaign.planning.jobs import campaign


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("@daily", "@daily"),
        ("*/5 * * * *", "*/5 * * * *"),
        ("PT6H", timedelta(hours=6)),
        ("P1DT30M", timedelta(days=1, minutes=30)),
        ("PT45S", timedelta(seconds=45)),
    ],
)
def test_dag_schedule_keeps_cron_and_presets_and_turns_durations_into_timedeltas(
    value: str | None, expected: object
) -> None:
    assert dag_schedule(value) == expected
    settings = AirflowSettings(schedule=value, catchup=True)
    assert plan_dag(plan_campaign(campaign(exps=("a",)), settings)[0], settings).schedule == expected


@pytest.mark.parametrize("value", ["61 * * * *", "@fortnightly", "P", "PT", ""])
def test_what_no_schedule_is(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(value) if value else None):
        schedule.checked(value)


def test_start_dates_from_yaml_or_iso_text() -> None:
    assert schedule.iso_date(date(2026, 1, 2)) == "2026-01-02"
    assert schedule.iso_date(datetime(2026, 1, 2, 3)) == "2026-01-02T03:00:00"
    assert schedule.iso_date("2026-01-02T03:00:00+00:00") == "2026-01-02T03:00:00+00:00"
    with pytest.raises(ValueError, match="soon"):
        schedule.iso_date("soon")
