"""Which experiments (and which of their phases) a slice of a campaign selects: the CLI's filters
(``MODEL=10M,50M PHASE=COOLDOWN``) applied to the campaign's experiments. Pure: no Airflow.

The campaign trigger DAG computes the slice table at parse time (``slice_table``) and selects from
it in its first task (``select_slice``); the UI's trigger button sends the same filters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoexp.campaign.planning.plan import ExperimentPlan
from autoexp.campaign.planning.settings import Keys

CAMPAIGN_DAG_PREFIX = "autoexp_campaign_"


class SliceError(ValueError):
    """A filter that cannot select anything meaningful; ``str()`` is one line naming the filter."""


def campaign_dag_id(config_path: str | Path) -> str:
    """The trigger DAG of a config: ``autoexp_campaign_<stem>`` (the contract between the issue-16 parts)."""
    return f"{CAMPAIGN_DAG_PREFIX}{Path(config_path).stem}"


def campaign_report_dag_id(config_path: str | Path) -> str:
    """The report DAG of a config: ``autoexp_campaign_report_<stem>``."""
    return f"{CAMPAIGN_DAG_PREFIX}report_{Path(config_path).stem}"


def grid_axes(config_path: str | Path) -> list[str]:
    """The config's grid axes in document order: the keys whose value is a list (as ``autoexp list``
    shows them), read from the YAML tree without expanding the grid."""
    from autoexp.config import load_config  # the engine, only where the trigger DAG is built
    from autoexp.config.yamlio import YMap, YNode, YSeq

    found: dict[str, None] = {}

    def walk(node: YNode) -> None:
        if isinstance(node, YMap):
            for key, _, child in node.entries:
                if isinstance(child, YSeq):
                    found.setdefault(key, None)
                walk(child)
        elif isinstance(node, YSeq):
            for item in node.items:
                walk(item)

    walk(load_config(config_path).root)
    return list(found)


def _values(params: Mapping[str, Any], axes: Sequence[str] | None) -> dict[str, str]:
    names = params if axes is None else axes
    return {a: str(params[a]) for a in names if params.get(a) is not None}


def slice_table(
    plans: Sequence[ExperimentPlan], axes: Sequence[str], keys: Keys, every_variable: bool = False
) -> list[dict[str, Any]]:
    """Per experiment: its DAG id, its axis values and, per phase, the values of its jobs.

    A job's values are its experiment's (pretraining's TRAIN job holds every variable) overlaid
    with its own (the phase, mode and branch labels); only the axes', unless ``every_variable``
    (what the select task filters on, so that ``MODEL=10M`` works as in ``autoexp list``).
    """
    table = []
    for plan in plans:
        base = dict(plan.pretrain.train.params)
        role_keys = {keys.phase, keys.mode, keys.branch}
        phases = []
        for phase in plan.phases:
            jobs = [phase.train] + ([phase.convert] if phase.convert is not None else [])
            rows = [_values({**base, **dict(job.params)}, None if every_variable else axes) for job in jobs]
            phases.append({"key": phase.key, "jobs": rows})
        experiment_axes = {a: v for a, v in _values(base, axes).items() if a not in role_keys}
        table.append(
            {"dag_id": plan.dag_id, "experiment": plan.name, "axes": experiment_axes, "phases": phases}
        )
    return table


def axis_choices(table: Sequence[Mapping[str, Any]], axes: Sequence[str]) -> dict[str, list[str]]:
    """Every axis that has two values or more, with its values in config order (the form's pick lists)."""
    seen: dict[str, dict[str, None]] = {a: {} for a in axes}
    for experiment in table:
        for phase in experiment["phases"]:
            for row in phase["jobs"]:
                for axis, value in row.items():
                    seen.setdefault(axis, {})[value] = None
    return {a: list(values) for a, values in seen.items() if len(values) > 1}


@dataclass(frozen=True)
class Selected:
    """One experiment DAG to trigger, and the phases its run drives (its ``phases`` Param)."""

    dag_id: str
    experiment: str
    phases: tuple[str, ...]


def select_slice(table: Sequence[Mapping[str, Any]], filters: Mapping[str, Sequence[str]]) -> list[Selected]:
    """The experiments with at least one job that every filter keeps (AutoExperiment's rule: the
    job's ``str(value)`` is one of the filter's values), each with the phases of those jobs.

    A key no job has is an error (a typo would otherwise silently select nothing).
    """
    known = {axis for e in table for p in e["phases"] for row in p["jobs"] for axis in row}
    for key, values in filters.items():
        if key not in known:
            hint = ", ".join(sorted(known)) or "none"
            raise SliceError(f"filter {key}={','.join(values)}: no experiment has {key} (the axes: {hint})")
    wanted = {k: set(v) for k, v in filters.items() if v}
    chosen = []
    for experiment in table:
        phases = tuple(
            p["key"]
            for p in experiment["phases"]
            if any(all(row.get(k) in vs for k, vs in wanted.items()) for row in p["jobs"])
        )
        if phases:
            chosen.append(Selected(experiment["dag_id"], experiment["experiment"], phases))
    return chosen


def parse_filter_text(text: str) -> dict[str, list[str]]:
    """``"MODEL=10M,50M PHASE=COOLDOWN"`` (the CLI's positional filters, space-separated) -> a dict."""
    filters: dict[str, list[str]] = {}
    for word in text.split():
        key, sep, values = word.partition("=")
        if not sep or not key:
            raise SliceError(f"filter {word!r}: write KEY=VALUE[,VALUE...]")
        filters.setdefault(key, []).extend(v for v in values.split(",") if v)
    return filters


def merge_filters(*parts: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Filters from the form's pick lists and from the free text; an empty pick list means all."""
    merged: dict[str, list[str]] = {}
    for part in parts:
        for key, values in part.items():
            values = [str(v) for v in values]
            if values:
                merged.setdefault(key, []).extend(values)
    return merged


def summary(selected: Sequence[Selected], filters: Mapping[str, Sequence[str]]) -> str:
    """What a trigger starts, one line per experiment (the select task's log and the run's XCom)."""
    shown = " ".join(f"{k}={','.join(v)}" for k, v in filters.items()) or "(no filter: the whole campaign)"
    lines = [f"slice {shown}: {len(selected)} experiment(s)"]
    lines += [f"  {s.dag_id}: {', '.join(s.phases)}" for s in selected]
    return "\n".join(lines)
