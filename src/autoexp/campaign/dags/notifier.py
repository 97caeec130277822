"""Failure alerts for campaign tasks: experiment, phase, Slurm job id, state, exit code and log tail."""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook, BaseNotifier, Context

log = logging.getLogger(__name__)
_MAX_TAIL = 4000


def alert_text(context: Context, experiment: str) -> str:
    """One alert: what failed where, with the Slurm details the operator put into its error."""
    ti = context["ti"]
    job_id = None
    try:
        job_id = ti.xcom_pull(task_ids=ti.task_id, key="slurm_job_id", map_indexes=ti.map_index)
    except Exception as exc:  # an alert must go out even when XCom is unreachable
        log.warning("could not read the Slurm job id of %s: %s", ti.task_id, exc)
    error = str(context.get("exception") or "")[-_MAX_TAIL:]
    phase = ti.task_id.split(".", 1)[0]
    map_index = getattr(ti, "map_index", -1)
    where = f"{ti.dag_id}/{ti.task_id}" + (
        f"[{map_index}]" if map_index is not None and map_index >= 0 else ""
    )
    return (
        f"autoexp FAILED: experiment={experiment} phase={phase} task={where} run={ti.run_id} "
        f"try={ti.try_number} slurm_job={job_id or '-'}\n{error}"
    )


class CampaignNotifier(BaseNotifier):
    """Send a failure alert to a log file (default), an SMTP connection, or a Slack webhook connection.

    :param kind: ``log``, ``smtp`` or ``slack``.
    :param experiment: the experiment (DAG) name put into every alert.
    :param path: alert log for ``kind=log``; empty: ``$AIRFLOW_HOME/logs/autoexp-alerts.log``.
    :param to: recipients for ``kind=smtp``.
    :param conn_id: Airflow connection of the SMTP server or the Slack webhook (URL in host or password).
    """

    template_fields = ()

    def __init__(
        self, *, kind: str, experiment: str, path: str = "", to: tuple[str, ...] = (), conn_id: str = ""
    ) -> None:
        super().__init__()
        self.kind, self.experiment, self.path, self.to, self.conn_id = kind, experiment, path, to, conn_id

    def notify(self, context: Context) -> None:
        text = alert_text(context, self.experiment)
        if self.kind == "smtp":
            self._smtp(context, text)
        elif self.kind == "slack":
            self._slack(text)
        else:
            self._log_file(text)

    def _log_file(self, text: str) -> None:
        home = os.environ.get("AIRFLOW_HOME", str(Path.home() / "airflow"))
        path = Path(self.path or Path(home) / "logs" / "autoexp-alerts.log")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(f"{datetime.now(UTC).isoformat(timespec='seconds')} {text}\n")
        log.error("%s", text)

    def _smtp(self, context: Context, text: str) -> None:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        kwargs: dict[str, Any] = {"to": list(self.to), "subject": text.splitlines()[0], "html_content": text}
        if self.conn_id:
            kwargs["smtp_conn_id"] = self.conn_id
        SmtpNotifier(**kwargs).notify(context)

    def _slack(self, text: str) -> None:
        conn = BaseHook.get_connection(self.conn_id)
        url = conn.password or conn.host or ""
        if not url.startswith("https://"):
            raise ValueError(
                f"connection {self.conn_id}: put the Slack webhook https URL in host or password"
            )
        body = json.dumps({"text": text}).encode()
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(url, data=body, headers=headers)  # noqa: S310 (https checked above)
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            response.read()
