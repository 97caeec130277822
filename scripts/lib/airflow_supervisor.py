"""supervisord for Airflow's four components: one definition for scripts/demo and the test stacks.

`airflow standalone` starts the api-server, scheduler, dag-processor and triggerer once: when the
metadata database goes away for half a minute the scheduler, dag-processor and triggerer exit
(OperationalError) and nothing starts them again. supervisord (Debian's `supervisor`) restarts each
one whenever it exits, with a back-off while it keeps failing to start.

A component killed outright (SIGKILL, the OOM killer) leaves its `airflow serve-logs` child behind,
re-parented to init but still in the component's process group and still holding the log port: the
restarted component would log "address already in use". So each program starts through ``exec``
below, which first stops what is left of the program's previous process group (recorded in
``<state>/<program>.pgid``), then records its own and becomes the component (same pid, so
supervisord's signals reach Airflow itself). ``stopasgroup``/``killasgroup`` make supervisord's own
stops (a restart, the shutdown) take the whole group too.

A scheduler can also hang instead of exiting: after a database error Airflow 3.3.2's LocalExecutor
joins its workers without a bound (apache/airflow#67870) and the process neither heartbeats nor
exits, so supervisord never restarts it. With ``--health-url`` the config adds a ``scheduler-watch``
program (``watch``): when the API server's health says the database answers but the scheduler has
not been healthy for WATCH_STALE_S, it stops the scheduler's group, and supervisord starts a new one.

    airflow_supervisor.py conf --state DIR --logs DIR [--no-serve-logs] [--health-url URL]   # stdout
    airflow_supervisor.py exec --record FILE -- COMMAND ...
    airflow_supervisor.py sweep --state DIR             # stop every recorded group's leftovers
    airflow_supervisor.py watch --record FILE --health-url URL
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
SOCKET = "supervisor.sock"
SERVES_LOGS = ("scheduler", "triggerer")  # the components that start an `airflow serve-logs` child
# A component that exits within START_SECS of its start failed to start: supervisord waits 1, 2,
# 3, ... s before the next try (its back-off) and gives up after START_RETRIES failed starts in a
# row (~40 min of retries). With the database down a component dies ~5-15 s after its start.
START_SECS = 20
START_RETRIES = 70
# The scheduler and triggerer finish what they hold on SIGTERM; a task process can take a while.
STOP_WAIT_SECS = 30
GRACE = 10.0  # seconds a leftover group gets after SIGTERM before SIGKILL
# The health endpoint calls a scheduler unhealthy 30 s after its last heartbeat ([scheduler]
# scheduler_health_check_threshold); this long more, with the database answering, it is hung.
WATCH_STALE_S = 120.0
WATCH_INTERVAL_S = 15.0


def _value(text: str) -> str:
    """A value for supervisord's ini file: it expands ``%(name)s``, so a literal % is doubled."""
    return text.replace("%", "%%")


def _output(logs: Path, name: str) -> str:
    """A program's output, stderr included, appended to ``logs/<name>.log`` and never rotated."""
    return (
        f"stdout_logfile={_value(str(logs / f'{name}.log'))}\n"
        "stdout_logfile_maxbytes=0\n"
        "stdout_logfile_backups=0\n"
        "redirect_stderr=true\n"
    )


def config(
    state: Path,
    logs: Path,
    airflow: str,
    python: str = sys.executable,
    socket: Path | None = None,
    components: Sequence[str] = COMPONENTS,
    serve_logs: bool = True,
    health_url: str | None = None,
) -> str:
    """supervisord's config: the components of ``airflow`` (the ``airflow`` executable) under one
    supervisord whose only control channel is a unix socket (mode 0700), default ``state/SOCKET``.

    Each component's output goes to ``logs/<component>.log`` (appended, never rotated, as before);
    the programs inherit supervisord's environment (the AIRFLOW__* settings).

    ``serve_logs=False`` starts the scheduler and triggerer without their log servers: Airflow 3.3
    binds those to every interface with no host setting (``airflow/utils/serve_logs/core.py`` passes
    ``host=""``), and with every component on one machine the api-server reads the task logs from
    the files under ``$AIRFLOW_HOME/logs`` instead. ``health_url`` (the API server's
    ``/api/v2/monitor/health``) adds the ``scheduler-watch`` program.
    """
    sock = socket or state / SOCKET
    script = Path(__file__).resolve()
    sections = [
        f"[unix_http_server]\nfile={_value(str(sock))}\nchmod=0700\n",
        "[supervisord]\nnodaemon=true\n"
        f"logfile={_value(str(state / 'supervisord.log'))}\n"
        f"pidfile={_value(str(state / 'supervisord.pid'))}\n"
        f"childlogdir={_value(str(state))}\n",
        "[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n",
        f"[supervisorctl]\nserverurl=unix://{_value(str(sock))}\n",
    ]
    for name in components:
        record = state / f"{name}.pgid"
        command = [python, str(script), "exec", "--record", str(record), "--", airflow, name]
        if not serve_logs and name in SERVES_LOGS:
            command.append("--skip-serve-logs")
        sections.append(
            f"[program:{name}]\n"
            f"command={_value(shlex.join(command))}\n"
            "autostart=true\n"
            "autorestart=true\n"
            f"startsecs={START_SECS}\n"
            f"startretries={START_RETRIES}\n"
            "stopsignal=TERM\n"
            f"stopwaitsecs={STOP_WAIT_SECS}\n"
            "stopasgroup=true\n"
            "killasgroup=true\n"
            f"{_output(logs, name)}"
        )
    if health_url is not None and "scheduler" in components:
        record = state / "scheduler.pgid"
        command = [python, str(script), "watch", "--record", str(record), "--health-url", health_url]
        sections.append(
            "[program:scheduler-watch]\n"
            f"command={_value(shlex.join(command))}\n"
            "autostart=true\n"
            "autorestart=true\n"
            f"{_output(logs, 'scheduler-watch')}"
        )
    return "\n".join(sections)


@dataclass
class SchedulerWatch:
    """Decides, from the API server's health answers, when a scheduler is hung."""

    stale_s: float = WATCH_STALE_S
    unhealthy_since: float | None = None

    def hung(self, health: dict[str, Any] | None, now: float) -> bool:
        """True once the scheduler has been unhealthy for ``stale_s`` of answers in which the
        database was healthy; no answer, or a database away, starts the count again (the scheduler
        then exits by itself, and supervisord restarts it)."""
        status = {part: (health or {}).get(part, {}).get("status") for part in ("metadatabase", "scheduler")}
        if status["metadatabase"] != "healthy" or status["scheduler"] == "healthy":
            self.unhealthy_since = None
            return False
        if self.unhealthy_since is None:
            self.unhealthy_since = now
        return now - self.unhealthy_since >= self.stale_s


def _health(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:  # noqa: S310 (the config's own URL)
            body = json.load(answer)
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def watch(
    record: Path, health_url: str, stale_s: float = WATCH_STALE_S, interval: float = WATCH_INTERVAL_S
) -> None:
    """Stop the scheduler's recorded group whenever ``SchedulerWatch`` finds it hung; runs until killed."""
    verdict = SchedulerWatch(stale_s)
    while True:
        if verdict.hung(_health(health_url), time.monotonic()):
            stopped = stop_recorded_group(record)
            print(
                f"airflow_supervisor: the scheduler has not heartbeat for {stale_s:.0f} s while the database "
                f"answered ({health_url}); stopped its group {sorted(stopped)} for supervisord to restart",
                file=sys.stderr,
                flush=True,
            )
            verdict.unhealthy_since = None
        time.sleep(interval)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, pgrp, ...), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def start_time(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (tells a reused pid apart), or None."""
    fields = _stat(pid)
    return fields[19] if fields else None


def group_members(pgid: int) -> set[int]:
    """Live (not zombie) processes in process group ``pgid``."""
    members = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(int(stat.parent.name))
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            members.add(int(stat.parent.name))
    return members


def stop_recorded_group(record: Path, grace: float = GRACE) -> set[int]:
    """Stop what is left of the process group recorded in ``record`` ("PGID START_TIME"); return
    the pids that were stopped.

    A live leader that started at another time is an unrelated process that got the same pid: left
    alone. While any member of the old group lives, the kernel hands out its id to no new process.
    """
    try:
        pgid_text, started = record.read_text().split()
        pgid = int(pgid_text)
    except (OSError, ValueError):
        return set()
    now = start_time(pgid)
    if now is not None and now != started:
        return set()
    members = group_members(pgid) - {os.getpid()}
    if not members:
        return set()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while group_members(pgid) - {os.getpid()} and time.monotonic() < deadline:
        time.sleep(0.2)
    if group_members(pgid) - {os.getpid()}:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    return members


def run(record: Path, command: list[str]) -> None:
    """Stop the leftovers of the program's previous group, record this one, become ``command``."""
    left = stop_recorded_group(record)
    if left:
        print(
            f"airflow_supervisor: stopped {len(left)} leftover process(es) of the previous run: "
            f"{sorted(left)}",
            file=sys.stderr,
            flush=True,
        )
    with contextlib.suppress(PermissionError):  # a session leader is a group leader already
        os.setpgrp()  # supervisord made us a group leader; a start by hand gets one too
    record.write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    os.execvp(command[0], command)  # noqa: S606 (an argument list, no shell)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = parser.add_subparsers(dest="verb", required=True)
    conf = sub.add_parser("conf", help="print the supervisord config")
    conf.add_argument("--state", type=Path, required=True, help="socket, pid file, records")
    conf.add_argument("--logs", type=Path, required=True, help="where <component>.log goes")
    conf.add_argument("--airflow", default=str(Path(sys.executable).with_name("airflow")))
    conf.add_argument(
        "--no-serve-logs", action="store_true", help="no log servers (they listen on every interface)"
    )
    conf.add_argument("--health-url", help="the API server's health URL: adds the scheduler-watch program")
    ex = sub.add_parser("exec", help="stop the previous group's leftovers, then run COMMAND")
    ex.add_argument("--record", type=Path, required=True)
    ex.add_argument("command", nargs="+")
    wa = sub.add_parser("watch", help="stop a scheduler that stopped heartbeating while the database answers")
    wa.add_argument("--record", type=Path, required=True, help="the scheduler's group record")
    wa.add_argument("--health-url", required=True)
    wa.add_argument("--stale", type=float, default=WATCH_STALE_S, help="seconds unhealthy before the stop")
    wa.add_argument("--interval", type=float, default=WATCH_INTERVAL_S, help="seconds between health reads")
    sweep = sub.add_parser("sweep", help="stop the leftovers of every group recorded in --state")
    sweep.add_argument("--state", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.verb == "conf":
        serve_logs = not args.no_serve_logs
        state, logs = args.state.resolve(), args.logs.resolve()
        sys.stdout.write(config(state, logs, args.airflow, serve_logs=serve_logs, health_url=args.health_url))
    elif args.verb == "watch":
        watch(args.record, args.health_url, args.stale, args.interval)
    elif args.verb == "exec":
        run(args.record, args.command)
    else:
        for record in sorted(args.state.glob("*.pgid")):
            if left := stop_recorded_group(record):
                print(f"airflow_supervisor: stopped {sorted(left)} ({record.stem})", file=sys.stderr)
            record.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
