"""Task-time side of the campaign report: read every experiment's report and the campaign's sacct over ONE
SSH connection, then write the report files (all decisions are in planning.campaign_report)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from airflow.sdk import Context
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmError

from autoexp.campaign.planning.checkpoint_layout import iteration_dirs
from autoexp.campaign.report import attempts as per_attempt
from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.report import campaign_report_render as render
from autoexp.campaign.report import run_states
from autoexp.campaign.report.campaign_report_paths import campaign_report_dir

log = logging.getLogger(__name__)
# A training attempt's log is read in chunks: from its start up to its first iteration line (after the
# arguments and start-up lines; at most _HEAD_CHUNKS), then its last chunk (its highest iteration).
_CHUNK = 64 * 1024
_HEAD_CHUNKS = 4


def _checkpoint_times(hook: Any, folders: Sequence[str]) -> dict[str, list[float]]:
    """mtimes of the ``iter_*`` folders of the phases with a failed attempt (wasted time starts there)."""
    times: dict[str, list[float]] = {}
    for folder in folders:
        try:
            names = iteration_dirs(hook.list_dir(folder)).values()
        except Exception as exc:  # no checkpoint folder: the whole failed attempt counts as wasted
            log.info("no checkpoints under %s (%s)", folder, exc)
            continue
        times[folder] = [hook.stat(f"{folder}/{name}").mtime for name in names]
    return times


def _cancel_marker(hook: Any, path: str) -> str:
    """The text of a cancelled training's marker; "" when there is none (a cancel from outside Airflow)
    or it cannot be read (the run is then judged from its log alone)."""
    try:
        text: str = hook.read_text(path)
    except RemotePathNotFoundError:
        return ""
    except SlurmError as exc:
        log.info("cannot read the cancel marker %s (%s)", path, exc)
        return ""
    return text


def _iteration_lines(hook: Any, path: str) -> per_attempt.LogProgress | None:
    """The iteration lines of a training attempt's log: its head up to the first one, and its last
    chunk (two reads for most logs, whatever their size)."""
    head, offset = "", 0
    try:
        for _ in range(_HEAD_CHUNKS):
            chunk = hook.read_log(path, offset, _CHUNK)
            head, offset = head + chunk.text, chunk.next_offset
            if chunk.next_offset - chunk.offset < _CHUNK:  # the whole log is read
                return per_attempt.log_progress(head)
            if per_attempt.log_progress(head) is not None:
                break
        size = hook.stat(path).size
        tail = hook.read_log(path, max(offset, size - _CHUNK), _CHUNK).text if size > offset else ""
    except Exception as exc:  # a log gone (cleaned up, moved): the attempt's figures are sacct's alone
        log.info("no log of a training attempt at %s (%s)", path, exc)
        return None
    return per_attempt.log_progress(head + "\n" + tail)


def build_campaign_report(
    *,
    stem: str,
    ssh_conn_id: str,
    since: str,
    specs: Sequence[Mapping[str, Any]],
    context: Context,
) -> dict[str, Any]:
    """Collect, compute and write the campaign report of config ``stem``; returns a summary for XCom."""
    from slurm_operator.hooks.slurm import SlurmHook
    from slurm_operator.policy.completion import read_tail

    experiments = [cr.ExperimentSpec.from_dict(s) for s in specs]
    budgets = [float(b) for b in context["params"].get("budgets") or []]
    reports: dict[str, list[dict[str, Any]]] = {}
    with SlurmHook(ssh_conn_id) as hook:  # one connection for the reads, the sacct and the stats
        for spec in experiments:
            try:
                reports[spec.dag_id] = list(json.loads(hook.read_text(spec.report_json)))
            except Exception as exc:  # an experiment without a report yet is a row of missing cells
                log.info("%s: no report yet at %s (%s)", spec.dag_id, spec.report_json, exc)
        names = [job for spec in experiments for phase in spec.phases for job in phase.jobs]
        records = hook.accounting(names, since)
        failed_trains = {r.name for r in records if r.state.value in cr.WASTED_STATES}
        folders = [p.checkpoint_dir for s in experiments for p in s.phases if p.jobs[0] in failed_trains]
        times = _checkpoint_times(hook, sorted(set(folders)))
        phases = [p for s in experiments for p in s.phases]
        newest = run_states.latest(records)
        logs = run_states.logs_to_check(phases, newest)
        tails = {job: read_tail(hook, path) for job, path in logs.items()}
        markers = {
            job: _cancel_marker(hook, path) for job, path in run_states.markers_to_check(logs, newest).items()
        }
        progress = {
            job_id: _iteration_lines(hook, path)
            for job_id, path in per_attempt.training_logs(experiments, records).items()
        }
    vocab = {p.jobs[0]: (s.vocab, s.tensor_parallel) for s in experiments for p in s.phases}
    diverged = run_states.diverged_from_logs(tails, vocab, markers)
    campaign, attempts = cr.build(
        stem,
        experiments,
        reports,
        records,
        generated_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        checkpoint_times=times,
        budgets=budgets,
        diverged=diverged,
        progress=progress,
    )
    out_dir = campaign_report_dir(stem, os.environ)
    files = render.write_files(campaign, attempts, reports, out_dir)
    log.info(
        "campaign %s (%d sacct records):\n%s", stem, len(records), render.text_table(campaign["experiments"])
    )
    log.info("%s", render.answer_text(campaign))  # the fit, the held-out check, the LR law, the cost
    hours = campaign["gpu_hours"]
    lost = campaign["cost"]["lost_by_cause"]
    log.info(
        "what each training attempt did:\n%s",
        "\n".join(per_attempt.attempts_text(campaign["training_attempts"], lost)),
    )
    log.info("report files in %s: %s", out_dir, ", ".join(f.name for f in files))
    return {"dir": str(out_dir), "files": [f.name for f in files], "total_hours": hours["total"]}
