"""SlurmHook: Slurm verbs over an Airflow SSH connection (synchronous, paramiko via the SSH provider)."""

from __future__ import annotations

import errno
import logging
import posixpath
import random
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko
from airflow.providers.ssh.hooks.ssh import SSHHook

from slurm_operator.hooks import jump_connect, ssh_route
from slurm_operator.hooks.paramiko_errors import TRANSIENT as _TRANSIENT
from slurm_operator.hooks.paramiko_errors import describe_connect_error
from slurm_operator.model.exceptions import (
    RemotePathNotFoundError,
    SlurmCommandError,
    SlurmConnectionError,
)
from slurm_operator.model.records import CommandResult, JobRecord, JobStates, LogChunk, RemoteStat
from slurm_operator.model.states import ACTIVE_STATES
from slurm_operator.remote import commands, log_window, parsers

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is Python 3.11+

log = logging.getLogger(__name__)

# Seconds a command's output may still come after its exit status (see SlurmHook._run_once).
EOF_GRACE_S = 5.0


class SlurmHook:
    """Run Slurm commands and move files over one SSH connection.

    :param ssh_conn_id: an Airflow SSH connection (host, port, login, ``key_file``, ``host_key``...).
    :param cmd_timeout: seconds one remote command may take before it is abandoned.
    :param connect_retries: extra connection attempts after a transient failure (refused, reset,
        timeout), with jittered backoff; authentication and host-key failures are never retried.
    """

    def __init__(self, ssh_conn_id: str, cmd_timeout: float = 60, *, connect_retries: int = 2) -> None:
        self.ssh_conn_id = ssh_conn_id
        self.cmd_timeout = cmd_timeout
        self.connect_retries = connect_retries
        self._ssh: Any = None
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._jumps: list[paramiko.SSHClient] = []
        self.route_note = ""  # for doctor: the hops whose host keys were checked, the certificate
        self._folders_made: set[str] = set()  # by _upload: one mkdir per folder, not per file
        self.commands_run = 0  # for benchmarks and tests: remote commands executed by this hook
        self.connections_opened = 0

    # -- transport -------------------------------------------------------------------------------

    @property
    def target(self) -> str:
        """``user@host:port (connection 'id')`` for messages."""
        ssh = self._ssh
        where = f"{ssh.username}@{ssh.remote_host}:{ssh.port} " if ssh is not None else ""
        return f"{where}(connection {self.ssh_conn_id!r})"

    def _ssh_hook(self) -> Any:
        if self._ssh is None:
            try:
                # One attempt per get_conn: our own loop retries only what is worth retrying.
                self._ssh = SSHHook(
                    ssh_conn_id=self.ssh_conn_id, cmd_timeout=self.cmd_timeout, conn_retry_attempts=1
                )
            except Exception as exc:  # the provider raises bare ValueError/AirflowException for bad config
                raise SlurmConnectionError(f"SSH connection {self.ssh_conn_id!r} is unusable: {exc}") from exc
        return self._ssh

    def get_conn(self) -> paramiko.SSHClient:
        """The live SSH client, connecting (again) if there is none or it died."""
        client = self._client
        transport = client.get_transport() if client else None
        if client is not None and transport is not None and transport.is_active():
            return client
        self.close()
        for attempt in range(self.connect_retries + 1):
            try:
                client = self._open()
            except ssh_route.RouteError as exc:  # names the hop; only a refused or lost one is retried
                if not exc.transient or attempt == self.connect_retries:
                    raise
                self._pause(attempt, exc)
                continue
            except _TRANSIENT as exc:
                if attempt == self.connect_retries:
                    raise SlurmConnectionError(
                        f"cannot connect to {self.target}: {describe_connect_error(exc)}"
                    ) from exc
                self._pause(attempt, exc)
                continue
            except SlurmConnectionError:
                raise
            except Exception as exc:
                raise SlurmConnectionError(
                    f"cannot connect to {self.target}: {describe_connect_error(exc)}"
                ) from exc
            self._client = client
            self.connections_opened += 1
            return client
        raise AssertionError("unreachable")

    def _pause(self, attempt: int, exc: BaseException) -> None:
        delay = min(8.0, 0.5 * 2**attempt) * (0.5 + random.random())  # noqa: S311 (jitter)
        log.warning("connecting to %s failed (%s); retrying in %.1f s", self.target, exc, delay)
        time.sleep(delay)

    def _open(self) -> paramiko.SSHClient:
        """A new client, along the connection's route when it names a jump host (``ssh_route``).
        The connection, key and certificate are read now: a renewed one counts at each reconnect."""
        ssh = self._ssh_hook()
        route = ssh_route.route_for(ssh.get_connection(self.ssh_conn_id))
        if route is not None:
            cert = ssh_route.certificate_status(route.key_file)
            *self._jumps, client = jump_connect.open_sync(route)
            hops = ", ".join(f"{route.role(h)} {h.label}" for h in (*route.jumps, route.target))
        else:
            cert = ssh_route.certificate_status(ssh.key_file)
            ssh.client = None  # never hand back the provider's cached, possibly dead client
            client = ssh.get_conn()
            assert isinstance(client, paramiko.SSHClient)
            hops = f"{ssh.remote_host}:{ssh.port}"
        self.route_note = "; ".join(filter(None, [f"host key checked on {hops}", cert]))
        return client

    def close(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None
        while self._jumps:  # the hops the target was tunnelled through, nearest first
            self._jumps.pop().close()

    def __enter__(self) -> SlurmHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(
        self,
        command: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        idempotent: bool = True,
    ) -> CommandResult:
        """Run one remote command, reconnecting once if the connection had dropped.

        A non-idempotent command (sbatch) is re-sent only when the break came before it reached
        the server; otherwise it raises SlurmConnectionError, because running it again could
        submit the same job twice (the operator then re-attaches by job name).
        """
        sent: list[bool] = []
        try:
            return self._run_once(command, stdin, timeout, sent)
        except (*_TRANSIENT, paramiko.SSHException) as exc:
            self.close()
            if sent and not idempotent:
                raise SlurmConnectionError(
                    f"SSH connection to {self.target} broke after the command was sent ({exc}); "
                    f"not re-sending it, its outcome is unknown: {command}"
                ) from exc
            log.warning("SSH connection to %s broke (%s); reconnecting once", self.target, exc)
            return self._run_once(command, stdin, timeout, [])

    def _run_once(
        self, command: str, stdin: str | None, timeout: float | None, sent: list[bool]
    ) -> CommandResult:
        client = self.get_conn()
        limit = self.cmd_timeout if timeout is None else timeout
        transport = client.get_transport()
        assert transport is not None
        channel = transport.open_session(timeout=limit)
        self.commands_run += 1
        try:
            channel.settimeout(limit)
            sent.append(True)
            channel.exec_command(command)
            if stdin is not None:
                channel.sendall(stdin.encode())
            channel.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + limit
            eof_by: float | None = None
            while True:
                # Drain both streams as they come: a full stderr window must not stall stdout.
                while channel.recv_ready():
                    out += channel.recv(65536)
                while channel.recv_stderr_ready():
                    err += channel.recv_stderr(65536)
                pending = channel.recv_ready() or channel.recv_stderr_ready()
                if channel.exit_status_ready() and not pending:
                    # sshd may send the exit status before the last output it read from the command
                    # (a start condition's "1" was lost so, under load): the output is whole at the
                    # channel's EOF. Bounded: a child left in the background may hold it open.
                    if channel.eof_received or channel.closed:
                        break
                    eof_by = eof_by or time.monotonic() + EOF_GRACE_S
                    if time.monotonic() > eof_by:
                        log.warning("no EOF %g s after the exit status of: %s", EOF_GRACE_S, command)
                        break
                    time.sleep(0.005)
                    continue
                if time.monotonic() > deadline:
                    raise SlurmCommandError(
                        f"remote command timed out after {limit:g} s on {self.target}: {command}"
                    )
                channel.status_event.wait(0.01)
            status = channel.recv_exit_status()
        finally:
            channel.close()
        return CommandResult(status, out.decode(errors="replace"), err.decode(errors="replace"))

    def _check(self, command: str, result: CommandResult, what: str) -> CommandResult:
        parsers.check_command(command, result.exit_status, result.stdout, result.stderr, what)
        return result

    # -- Slurm verbs -----------------------------------------------------------------------------

    def submit(self, **args: Unpack[commands.SubmitArgs]) -> str:
        """Submit a batch script with ``sbatch --parsable``; return the job id.

        Keywords (``commands.SubmitArgs``): ``script`` (text: sent on stdin, or written to
        ``upload_to`` over SFTP first so the cluster keeps a copy) or ``script_path`` (a path on the
        cluster); ``sbatch_args``; ``environment``. Raises SlurmSubmitError (or the retryable
        SlurmSubmitLimitError) with Slurm's reason when sbatch refuses.
        """
        plan, command = commands.prepare_submit(**args)
        if plan.upload is not None:
            self.write_text(plan.upload, str(args.get("script")))
        result = self.run(command, stdin=plan.stdin, idempotent=False)
        job = parsers.submitted_job(command, result.exit_status, result.stdout, result.stderr)
        log.info("[slurm %s] submitted on %s: %s", job, self.target, command)
        return job

    def submit_attempt(self, spec: commands.AttemptSubmit, script: str | None = None) -> parsers.Submitted:
        """Submit one attempt from a script copy of its own, in ONE remote command
        (``commands.submit_attempt``): the copy is filled from ``script`` (sent on stdin) or from the
        cluster file ``spec.source``; with ``spec.lock_path`` an active job called ``spec.name`` is
        adopted instead. Never re-sent once it reached the server (``run``'s ``idempotent=False``):
        the caller re-attaches by job name.
        """
        if (script is None) == (spec.source is None):
            raise ValueError("give exactly one of script= and spec.source")
        command = commands.submit_attempt(spec)
        result = self.run(command, stdin=script, idempotent=False)
        done = parsers.submitted_attempt(command, result.exit_status, result.stdout, result.stderr)
        log.info("[slurm %s] %s on %s: %s", done.job_id, "adopted" if done.adopted else "submitted",
                 self.target, command)  # fmt: skip
        return done

    def job_states(self, job_ids: Sequence[str], watch: Sequence[str] = ()) -> JobStates:
        """States of every job in ONE remote command (sacct, then squeue/scontrol for what it lacks;
        ``squeue --start`` for the live reason and estimated start of the pending ones); with
        ``watch``, the same command also reads the cluster's clock and stats those paths."""
        ids = commands.job_ids(job_ids) if job_ids else []
        if not ids:
            return JobStates(records={}, source="none", authoritative=True)
        paths = list(dict.fromkeys(watch))
        command = commands.job_states(ids, watch=bool(paths))
        result = self.run(command, stdin=commands.watch_input(paths) if paths else None)
        self._check(command, result, "job-state query")
        return parsers.parse_job_states(result.stdout, result.stderr, ids, paths)

    def accounting(self, names: Sequence[str], since: str) -> list[JobRecord]:
        """Every run since ``since`` of the jobs called ``names``, from ONE sacct (requeues included)."""
        if not names:
            return []
        command = commands.accounting(since)
        result = self.run(command, stdin=commands.accounting_input(names))
        self._check(command, result, "sacct by job name")
        return parsers.parse_sacct(result.stdout)

    def find_active_jobs(self, name: str) -> list[JobRecord]:
        """This user's unfinished jobs called ``name`` (to re-attach instead of submitting twice)."""
        command = commands.find_active(name)
        result = self._check(command, self.run(command), f"squeue --name={name}")
        return [r for r in parsers.parse_squeue(result.stdout) if r.state in ACTIVE_STATES]

    def cancel(
        self, job_id: str, signal: str | None = None, *, marker: str | None = None, reason: str = ""
    ) -> None:
        """scancel; with ``marker``, first write ``reason`` there (a cancel of our own, not a person's)."""
        command = commands.cancel(job_id, signal, marker=marker, reason=reason)
        self._check(command, self.run(command), f"scancel {job_id}")
        log.info("[slurm %s] %s", job_id, "cancelled" if signal is None else f"sent {signal}")

    # -- files (SFTP) ----------------------------------------------------------------------------

    def sftp(self) -> paramiko.SFTPClient:
        client = self.get_conn()
        if self._sftp is None or self._sftp.get_channel() is None or self._sftp.get_channel().closed:  # type: ignore[union-attr]
            self._sftp = client.open_sftp()
        return self._sftp

    def _sftp_call(self, path: str, fn: Any) -> Any:
        try:
            try:
                return fn(self.sftp())
            except (*_TRANSIENT, paramiko.SSHException) as exc:
                log.warning("SFTP to %s broke (%s); reconnecting once", self.target, exc)
                self.close()
                return fn(self.sftp())
        except FileNotFoundError as exc:
            raise RemotePathNotFoundError(path, self.target) from exc
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise RemotePathNotFoundError(path, self.target) from exc
            raise SlurmCommandError(f"SFTP on {self.target} failed for {path}: {exc}") from exc

    def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        """Up to ``max_bytes`` of ``path`` from byte ``offset`` (for streaming a growing log)."""

        def read(sftp: paramiko.SFTPClient) -> LogChunk:
            with sftp.open(path, "rb") as fh:
                size = fh.stat().st_size or 0
                start, count = log_window.read_window(path, size, offset, max_bytes)
                fh.seek(start)
                data = fh.read(count) if count else b""
            return log_window.decode_chunk(data, start, at_eof=start + len(data) >= size)

        chunk: LogChunk = self._sftp_call(path, read)
        return chunk

    def stat(self, path: str) -> RemoteStat:
        """Metadata of ``path``; a missing path gives ``exists=False`` rather than an error."""
        try:
            st = self._sftp_call(path, lambda sftp: sftp.stat(path))
        except RemotePathNotFoundError:
            return RemoteStat(path=path, exists=False)
        is_dir = bool(st.st_mode is not None and (st.st_mode & 0o170000) == 0o040000)
        return RemoteStat(
            path=path, exists=True, is_dir=is_dir, size=st.st_size or 0, mtime=float(st.st_mtime or 0)
        )

    def list_dir(self, path: str) -> list[str]:
        names: list[str] = self._sftp_call(path, lambda sftp: sftp.listdir(path))
        return sorted(names)

    def read_text(self, path: str) -> str:
        def read(sftp: paramiko.SFTPClient) -> str:
            with sftp.open(path, "rb") as fh:
                data: bytes = fh.read()
            return data.decode(errors="replace")

        text: str = self._sftp_call(path, read)
        return text

    def write_text(self, path: str, text: str) -> None:
        """Write ``path`` atomically (temporary file + rename), creating its folder."""
        self._upload(path, lambda fh: fh.write(text.encode()))

    def upload_file(self, local: str | Path, remote: str) -> None:
        local = Path(local)
        if not local.is_file():
            raise FileNotFoundError(f"local file to upload not found: {local}")
        data = local.read_bytes()
        self._upload(remote, lambda fh: fh.write(data))

    def _upload(self, path: str, write: Any) -> None:
        folder = posixpath.dirname(path)
        # A task that writes many files into one folder (a run's scripts) creates it once.
        if folder and folder not in self._folders_made:
            command = commands.mkdir_p(folder)
            self._check(command, self.run(command), f"mkdir -p {folder}")
            self._folders_made.add(folder)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"

        def put(sftp: paramiko.SFTPClient) -> None:
            with sftp.open(tmp, "wb") as fh:
                write(fh)
            sftp.posix_rename(tmp, path)

        self._sftp_call(path, put)
