"""Task-time callables of a campaign DAG (stage scripts, branch start, report); run on Airflow workers."""

from __future__ import annotations

import json
import logging
import posixpath
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import Context
from airflow.sdk.exceptions import AirflowException

from autoexp.campaign.configs.config_source import ConfigDriftError, check_unchanged
from autoexp.campaign.planning import run_layout
from autoexp.campaign.preflight import tool_stage
from autoexp.campaign.report import report_data as rep

log = logging.getLogger(__name__)


def _hook(ssh_conn_id: str) -> Any:
    from slurm_operator.hooks.slurm import SlurmHook

    return SlurmHook(ssh_conn_id)


def stage(
    *,
    config_path: str,
    expected_hash: str,
    expected_env: Mapping[str, str | None],
    scripts: Mapping[str, str],
    copies: Mapping[str, str],
    ssh_conn_id: str,
    context: Context,
) -> dict[str, str]:
    """Stage the shipped tools the jobs name (``TOOLS_ROOT``), render each job's sbatch script and
    upload it; a dry run only renders and logs.

    The jobs are expanded again here (the DAG holds no rendered script), from the same file and the
    same ``${oc.env:...}`` values the DAG was planned from: anything else is refused, since the
    scripts would then write where the DAG's tasks do not look. Idempotent: the same config renders
    the same bytes, and writes are atomic renames.
    """
    from autoexp.config import expand, load_config, render

    path = Path(config_path)
    try:
        check_unchanged(path, expected_hash, expected_env)
    except ConfigDriftError as exc:
        raise AirflowException(str(exc)) from None
    jobs = {job.name: job for job in expand(load_config(path))}
    missing = sorted(set(scripts) - set(jobs))
    if missing:
        raise AirflowException(f"{config_path}: jobs {', '.join(missing)} are no longer in the config")
    dry = bool(context["params"].get("dry_run"))
    hook = None if dry else _hook(ssh_conn_id)
    tools = tool_stage.targets([jobs[name].params for name in scripts])
    if hook is None:
        log.info("dry run: tool folders %s would be staged", [tool_stage.tool_dir(*t) for t in tools])
    else:
        stage_tools(hook, tools)  # before the scripts: a staged script always finds its tools
    staged: dict[str, str] = {}
    for name, remote in scripts.items():
        text = render(jobs[name])
        if hook is None:
            log.info("dry run: %s would be staged at %s:\n%s", name, remote, text)
            continue
        hook.write_text(remote, text)
        if copies.get(name) and copies[name] != remote:
            hook.write_text(copies[name], text)
        staged[name] = remote
        log.info("staged %s -> %s", name, remote)
    return staged


def stage_tools(hook: Any, tools: Sequence[tuple[str, str]]) -> list[str]:
    """Install each (TOOLS_ROOT, TOOLS_HASH) folder that is missing: one archive upload per hash, renamed
    into place (tool_stage.install); returns the folders this call installed."""
    from autoexp.config.builtins import tools_files, tools_hash

    uploaded: list[str] = []
    for root, digest in tools:
        folder = tool_stage.tool_dir(root, digest)
        if hook.run(tool_stage.present(root, digest)).stdout.strip() == "1":
            log.info("tools %s already staged", folder)
            continue
        if digest != tools_hash():
            raise AirflowException(
                f"the DAG was planned with tools {digest} but this worker has {tools_hash()}; "
                "wait for the DAG processor to re-parse, then clear this task"
            )
        token = uuid.uuid4().hex[:8]
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "tools.tar.gz"
            local.write_bytes(tool_stage.archive(tools_files()))
            tarball = f"{root.rstrip('/')}/.tmp-{digest}-{token}.tar.gz"
            hook.upload_file(local, tarball)
        result = hook.run(tool_stage.install(root, digest, tarball, token))
        if result.exit_status != 0:
            raise AirflowException(f"staging tools to {folder} failed: {result.stderr.strip()[-500:]}")
        log.info("tools %s: %s", folder, result.stdout.strip())
        if result.stdout.strip().endswith("installed"):  # else a concurrent stager's copy won the rename
            uploaded.append(folder)
    return uploaded


def check_start_condition(hook: Any, command: str, task: str) -> None:
    """Run the YAML's ``start_condition_cmd`` as given (e.g. the idempotent cooldown_helper link step).

    AutoExperiment waits and retries while it prints 0; here the branch checkpoint is already
    waited for by a deferred task, so anything but 1 is an error naming the command and its output.
    """
    result = hook.run(command)
    out = result.stdout.strip()
    log.info("start condition of %s: exit %s, output %r", task, result.exit_status, out)
    if result.exit_status != 0 or out != "1":
        raise AirflowException(
            f"start condition of {task} is not met (exit {result.exit_status}, printed {out[-200:]!r}, "
            f"expected 1; stderr {result.stderr.strip()[-300:]!r}): {command}"
        )


def _train_log(hook: Any, attempts: Sequence[Mapping[str, Any]] | None) -> str:
    texts = []
    for attempt in attempts or []:
        try:
            texts.append(hook.read_text(str(attempt["log_path"])))
        except Exception as exc:  # a purged log loses its losses, never the report
            log.warning("cannot read %s: %s", attempt.get("log_path"), exc)
    return "\n".join(texts)


def _earlier_attempts(hook: Any, pattern: str) -> list[dict[str, str]]:
    """A training this run did not submit (a sweep found it done): every attempt's log on the cluster."""
    try:
        names = hook.list_dir(posixpath.dirname(pattern))
    except Exception as exc:  # no folder: no losses, never no report
        log.warning("cannot list the training logs %s: %s", pattern, exc)
        return []
    return [{"log_path": path} for path in run_layout.attempt_logs(pattern, names)]


def build_report(
    *, ssh_conn_id: str, experiment: str, phases: Sequence[Mapping[str, Any]], out_dir: str, context: Context
) -> dict[str, Any]:
    """Collect results.json and training losses of every checkpoint; write table and plots to out_dir."""
    hook = _hook(ssh_conn_id)
    ti = context["ti"]
    rows: list[dict[str, Any]] = []
    for phase in phases:
        attempts = ti.xcom_pull(task_ids=phase["train_task"]) if phase["train_task"] else None
        if not attempts and phase.get("train_output"):
            attempts = _earlier_attempts(hook, phase["train_output"])
            log.info("%s: trained in earlier runs; losses from their %d log(s)", phase["key"], len(attempts))
        losses = rep.losses_from_log(_train_log(hook, attempts))
        for iteration in phase["checkpoints"]:
            results = None
            try:
                results = json.loads(hook.read_text(phase["results"].format(iteration=iteration)))
            except Exception as exc:  # a missing result is a gap in the table, reported below
                log.warning("%s iteration %s: no results (%s)", phase["key"], iteration, exc)
            rows.append(
                rep.row(
                    phase["key"],
                    phase["branch"],
                    iteration,
                    phase["tokens_per_iter"],
                    phase["param_count"],
                    losses,
                    results,
                )
            )
    log.info("report of %s:\n%s", experiment, rep.to_text(rows))
    with tempfile.TemporaryDirectory(prefix="autoexp-report-") as tmp:
        local = Path(tmp)
        files = [*rep.write_tables(rows, local), *rep.plot(rows, local, experiment)]
        remote = []
        for f in files:
            target = f"{out_dir.rstrip('/')}/{f.name}"
            hook.upload_file(str(f), target)
            remote.append(target)
    log.info("report files: %s", ", ".join(remote))
    return {"rows": len(rows), "files": remote, "missing_results": sum(r["score"] is None for r in rows)}
