"""Send alerts to a log file, by e-mail (the SMTP provider's notifier) or to Slack (the Slack provider's)."""

from __future__ import annotations

import html
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from airflow.sdk import BaseNotifier, Context
from slurm_operator.airflow_internals import DeadlineAlert, DeadlineReference, SyncCallback
from slurm_operator.model.ledger import Attempt

from autoexp.campaign.alerts.messages import (
    FailureRecorder,
    deadline_alert,
    failure_alert,
    resubmit_alert,
    retry_alert,
    rollback_alert,
    success_alert,
)
from autoexp.campaign.planning import run_layout
from autoexp.campaign.planning.settings import NotifierSettings

log = logging.getLogger(__name__)

_MESSAGES: dict[str, Callable[[Context, str], tuple[str, str]]] = {
    "failure": failure_alert,
    "retry": retry_alert,
    "success": success_alert,
}


@dataclass(frozen=True)
class Target:
    """Where alerts go (the ``airflow.notify`` keys).

    :param kind: ``log``, ``smtp`` or ``slack``.
    :param path: alert log of kind ``log``; empty: ``$AIRFLOW_HOME/logs/autoexp-alerts.log``.
    :param to: recipients of kind ``smtp``.
    :param conn_id: the SMTP connection (empty: Airflow's ``[email] email_conn_id``) or the Slack
        webhook connection.
    :param from_email: sender of kind ``smtp``; empty: the connection's ``from_email`` extra.
    """

    kind: str = "log"
    path: str = ""
    to: tuple[str, ...] = ()
    conn_id: str = ""
    from_email: str = ""

    @classmethod
    def of(cls, notify: NotifierSettings) -> Target:
        return cls(notify.kind, notify.path, notify.to, notify.conn_id, notify.from_email)

    def send(self, subject: str, text: str, context: Any) -> None:
        """One alert; the providers' notifiers are called directly: a log tail is not a template."""
        if self.kind == "smtp":
            from airflow.providers.smtp.notifications.smtp import SmtpNotifier

            smtp: dict[str, Any] = {"smtp_conn_id": self.conn_id} if self.conn_id else {}
            without_dag: Any = {k: v for k, v in context.items() if k != "dag"}  # see _NoTemplates
            SmtpNotifier(
                to=list(self.to),
                from_email=self.from_email or None,
                subject=subject,
                html_content=f"<pre>{html.escape(text)}</pre>",
                **smtp,
            ).notify(without_dag)
        elif self.kind == "slack":
            from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

            slack: Any = SlackWebhookNotifier(slack_webhook_conn_id=self.conn_id, text=text)
            slack.notify(context)
        else:
            self._log_file(text)

    def _log_file(self, text: str) -> None:
        home = os.environ.get("AIRFLOW_HOME", str(Path.home() / "airflow"))
        path = Path(self.path or Path(home) / "logs" / "autoexp-alerts.log")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} {text}\n")
        log.error("%s", text)

    def kwargs(self) -> dict[str, Any]:
        """JSON primitives, for a deadline callback (serialized with the DAG)."""
        return {
            "kind": self.kind,
            "path": self.path,
            "to": list(self.to),
            "conn_id": self.conn_id,
            "from_email": self.from_email,
        }


class _NoTemplates(BaseNotifier):
    """A notifier with nothing to render.

    A DAG callback run by ``dag.test()`` gets the serialized DAG in its context, which has no
    template environment: rendering (even of nothing) fails there. For the same reason the SMTP
    notifier gets the context without its DAG (it renders the connection's ``from_email``).
    """

    template_fields = ()

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        return None


class CampaignNotifier(_NoTemplates):
    """One alert of an experiment: a failed run (DAG callback), a task retry, or a run's success.

    :param event: ``failure``, ``retry`` or ``success``.
    :param experiment: the experiment (DAG) name put into every alert.
    :param target: where the alert goes.
    """

    def __init__(self, *, event: str, experiment: str, target: Target) -> None:
        super().__init__()
        if event not in _MESSAGES:
            raise ValueError(f"unknown alert event {event!r} (known: {', '.join(_MESSAGES)})")
        self.event, self.experiment, self.target = event, experiment, target

    def notify(self, context: Context) -> None:
        subject, text = _MESSAGES[self.event](context, self.experiment)
        self.target.send(subject, text, context)


def deadline_missed(context: dict[str, Any], *, experiment: str, within_secs: float, **target: Any) -> None:
    """Deadline callback (a ``SyncCallback``): the run is not done ``within_secs`` after it was queued."""
    subject, text = deadline_alert(context, experiment, within_secs)
    to = tuple(target.pop("to", ()))
    Target(to=to, **target).send(subject, text, context)


def dag_alerts(experiment: str, notify: NotifierSettings) -> dict[str, Any]:
    """The DAG's keyword arguments for its alerts: one per failed run, and the ones the config asks for."""
    target = Target.of(notify)
    alerts: dict[str, Any] = {
        "on_failure_callback": CampaignNotifier(event="failure", experiment=experiment, target=target)
    }
    if notify.on_success:
        alerts["on_success_callback"] = CampaignNotifier(
            event="success", experiment=experiment, target=target
        )
    if notify.deadline_secs:
        kwargs = {"experiment": experiment, "within_secs": notify.deadline_secs, **target.kwargs()}
        alerts["deadline"] = DeadlineAlert(
            reference=DeadlineReference.DAGRUN_QUEUED_AT,
            interval=timedelta(seconds=notify.deadline_secs),
            callback=SyncCallback(deadline_missed, kwargs=kwargs),
        )
    return alerts


@dataclass(frozen=True)
class ResubmitAlert:
    """A training operator's ``resubmit_alert``: one alert per Slurm resubmission within a try."""

    experiment: str
    target: Target

    def __call__(self, context: Context, ended: Attempt, reason: str) -> None:
        subject, text = resubmit_alert(context, self.experiment, ended, reason)
        self.target.send(subject, text, context)


def resubmit_alerts(experiment: str, notify: NotifierSettings) -> ResubmitAlert | None:
    """What a Slurm operator calls when it resubmits its job (``notify.on_retry``), or None."""
    return ResubmitAlert(experiment, Target.of(notify)) if notify.on_retry else None


def task_alerts(experiment: str, notify: NotifierSettings) -> dict[str, Any]:
    """Every task's callbacks (``default_args``): a final failure is recorded for the run's one alert."""
    callbacks: dict[str, Any] = {"on_failure_callback": FailureRecorder()}
    if notify.on_retry:
        target = Target.of(notify)
        callbacks["on_retry_callback"] = CampaignNotifier(event="retry", experiment=experiment, target=target)
    return callbacks


@dataclass(frozen=True)
class RollbackAlert:
    """A training operator's ``rollback_alert``: one alert per checkpoint rollback its jobs made
    (always on: a corrupt checkpoint is worth knowing even when the training then finished).

    :param checkpoint_dir: the training's ``--save`` folder, whose ckpt_check record the operator
        reads (``autoexp.campaign.tasks.rollbacks``).
    """

    experiment: str
    target: Target
    checkpoint_dir: str

    def __call__(self, context: Context, log_path: str, records: Sequence[str]) -> int:
        """Alert each rollback, ``records`` being its lines of ckpt_check's record; returns how many
        were sent (one that cannot be sent is logged: the others still go)."""
        sent = 0
        for record in records:
            subject, body = rollback_alert(
                context, self.experiment, log_path, run_layout.rollbacks_path(self.checkpoint_dir), record
            )
            try:
                self.target.send(subject, body, context)
            except Exception:  # an alert channel down must not fail the training
                log.exception("could not send %s", subject)
                continue
            sent += 1
        return sent


def rollback_alerts(experiment: str, notify: NotifierSettings, checkpoint_dir: str) -> RollbackAlert:
    """What a training operator calls with the rollbacks of ``checkpoint_dir`` it has not alerted yet."""
    return RollbackAlert(experiment, Target.of(notify), checkpoint_dir)
