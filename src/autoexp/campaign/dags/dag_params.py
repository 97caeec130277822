"""The Params of an experiment DAG: what its trigger form asks (phases, dry run, submissions per try)."""

from __future__ import annotations

from airflow.sdk import Param, ParamsDict  # type: ignore[attr-defined,unused-ignore]  # not in its 3.3.2 stub

from autoexp.campaign.planning.settings import AirflowSettings


def experiment_params(choices: dict[str, str], settings: AirflowSettings) -> ParamsDict:
    keys = list(choices)
    return ParamsDict(
        {
            # ``examples`` (not ``items.enum``, which stays for validation) makes the trigger form draw
            # a multi-select; ``values_display`` names each choice.
            "phases": Param(
                keys,
                type="array",
                items={"type": "string", "enum": keys},
                examples=keys,
                values_display=choices,
                title="Phases to run",
                description="the phases this run drives; the others are skipped",
            ),
            "dry_run": Param(
                False,
                type="boolean",
                title="Dry run",
                description="render and log the Slurm scripts, submit nothing",
            ),
            "max_attempts": Param(
                settings.max_attempts,
                type="integer",
                minimum=1,
                title="Slurm submissions per try",
                description="how often a task submits its job before the task try fails",
            ),
        }
    )
