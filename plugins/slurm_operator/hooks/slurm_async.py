"""AsyncSlurmHook: the SlurmHook verbs as coroutines over ONE shared asyncssh connection per conn id."""

from __future__ import annotations

import asyncio
import logging
import posixpath
import random
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import asyncssh
from airflow.providers.common.compat.connection import get_async_connection
from airflow.providers.ssh.hooks.ssh import SSHHookAsync

from slurm_operator.hooks import jump_connect, ssh_route
from slurm_operator.model.exceptions import (
    RemotePathNotFoundError,
    SlurmCommandError,
    SlurmConnectionError,
)
from slurm_operator.model.records import CommandResult, JobRecord, JobStates, LogChunk, RemoteStat
from slurm_operator.model.states import ACTIVE_STATES
from slurm_operator.remote import commands, log_window, parsers

# The SSH provider's async hook checks host keys unless told not to only from providers-ssh 7 (which needs
# Python 3.11): 6.x, the newest on Python 3.10, skips the check when the connection's extra does not say
# `no_host_key_check`, and then refuses a pinned `host_key`. There a direct connection that does not
# say is opened by the route code instead, which checks known_hosts and host_key as the sync hook does.
PROVIDER_CHECKS_HOST_KEYS = int(metadata.version("apache-airflow-providers-ssh").split(".")[0]) >= 7

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is Python 3.11+

log = logging.getLogger(__name__)
# asyncssh logs every channel at INFO: one line per poll per job would flood the triggerer's log.
logging.getLogger("asyncssh").setLevel(logging.WARNING)

T = TypeVar("T")
# The connection dropped (sshd restarted, network blip): reconnecting may help. Auth and host-key
# failures (PermissionDenied, HostKeyNotVerifiable) never get better by retrying.
_TRANSIENT = (
    asyncssh.ConnectionLost,
    asyncssh.ChannelOpenError,
    ConnectionError,
    OSError,
    asyncio.TimeoutError,
)


def describe_connect_error(exc: BaseException) -> str:
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"unknown or mismatched host key (check the connection's host_key extra): {exc}"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"authentication failed (wrong key or user): {exc}"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused (sshd down or wrong port): {exc}"
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timed out (host unreachable?)"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Shared:
    """One connection and its SFTP session, shared by every hook of one conn id in one event loop."""

    loop: weakref.ref[asyncio.AbstractEventLoop]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # sshd's MaxSessions (10 by default) caps channels per connection; stay below it.
    channels: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(8))
    conn: Any = None
    sftp: Any = None
    jumps: list[Any] = field(default_factory=list)  # the hops ``conn`` is tunnelled through
    commands_run: int = 0
    connections_opened: int = 0


class AsyncSlurmHook:
    """Slurm verbs as coroutines for triggers; every instance with the same ``ssh_conn_id`` in the
    same event loop (the triggerer's) shares one SSH connection, so N waiting jobs cost one
    connection, and with ``job_states`` one command per poll.

    :param ssh_conn_id: an Airflow SSH connection (``key_file``, ``host_key`` extras honoured).
    :param cmd_timeout: seconds one remote command may take.
    :param reconnect_attempts: connection attempts after a drop, with exponential backoff and jitter.
    :param connect_timeout: seconds one connection attempt may take.
    """

    _shared: ClassVar[dict[tuple[str, int], _Shared]] = {}

    def __init__(
        self,
        ssh_conn_id: str,
        *,
        cmd_timeout: float = 60,
        reconnect_attempts: int = 4,
        connect_timeout: float = 20,
    ) -> None:
        self.ssh_conn_id = ssh_conn_id
        self.cmd_timeout = cmd_timeout
        self.reconnect_attempts = reconnect_attempts
        self.connect_timeout = connect_timeout

    # -- shared connection -----------------------------------------------------------------------

    @property
    def shared(self) -> _Shared:
        # Keyed by loop too: asyncssh connections belong to the loop that opened them.
        loop = asyncio.get_running_loop()
        key = (self.ssh_conn_id, id(loop))
        shared = self._shared.get(key)
        if shared is None or shared.loop() is not loop:
            # Forget entries of loops that are gone (tests run one loop each; ids get reused).
            for k, v in list(self._shared.items()):
                if v.loop() is None or v.loop() is loop or v.loop().is_closed():  # type: ignore[union-attr]
                    del self._shared[k]
            shared = self._shared[key] = _Shared(loop=weakref.ref(loop))
        return shared

    async def _connect_once(self) -> tuple[Any, list[Any]]:
        """(connection, the jump hops it is tunnelled through): along the connection's route when it
        names a jump host. Connection, key and certificate are read now, so a renewal counts here."""
        try:
            conn = await get_async_connection(self.ssh_conn_id)
            says = PROVIDER_CHECKS_HOST_KEYS or "no_host_key_check" in (conn.extra_dejson or {})
            route = ssh_route.route_for(conn, direct=not says)
        except SlurmConnectionError:
            raise
        except Exception as exc:  # the provider raises bare errors for missing or bad connections
            raise SlurmConnectionError(f"SSH connection {self.ssh_conn_id!r} is unusable: {exc}") from exc
        if route is not None:
            *jumps, target = await jump_connect.open_async(route)
            return target, jumps
        ssh_route.certificate_status((conn.extra_dejson or {}).get("key_file"))
        provider: Any = SSHHookAsync(ssh_conn_id=self.ssh_conn_id)
        try:
            return await asyncio.wait_for(provider.get_conn(), self.connect_timeout), []
        except (asyncssh.HostKeyNotVerifiable, asyncssh.PermissionDenied) as exc:
            raise SlurmConnectionError(
                f"cannot connect ({self._where()}): {describe_connect_error(exc)}"
            ) from exc
        except _TRANSIENT:
            raise
        except Exception as exc:  # the provider raises bare errors for missing or bad connections
            raise SlurmConnectionError(f"SSH connection {self.ssh_conn_id!r} is unusable: {exc}") from exc

    def _where(self) -> str:
        return f"connection {self.ssh_conn_id!r}"

    async def get_conn(self) -> Any:
        """The shared live connection, (re)connecting with backoff and jitter when needed."""
        shared = self.shared
        async with shared.lock:
            if shared.conn is not None and not shared.conn.is_closed():
                return shared.conn
            await self._drop(shared)
            for attempt in range(self.reconnect_attempts + 1):
                try:
                    shared.conn, shared.jumps = await self._connect_once()
                except ssh_route.RouteError as exc:  # names the hop; only a refused or lost one is retried
                    if not exc.transient or attempt == self.reconnect_attempts:
                        raise
                    await self._pause(attempt, exc)
                    continue
                except _TRANSIENT as exc:
                    if attempt == self.reconnect_attempts:
                        raise SlurmConnectionError(
                            f"cannot connect ({self._where()}) after {attempt + 1} attempts: "
                            f"{describe_connect_error(exc)}"
                        ) from exc
                    await self._pause(attempt, exc)
                    continue
                shared.connections_opened += 1
                return shared.conn
        raise AssertionError("unreachable")

    async def _pause(self, attempt: int, exc: BaseException) -> None:
        delay = min(10.0, 0.5 * 2**attempt) * (0.5 + random.random())  # noqa: S311 (jitter)
        log.warning("SSH %s: %s; reconnecting in %.1f s", self._where(), exc, delay)
        await asyncio.sleep(delay)

    @staticmethod
    async def _drop(shared: _Shared) -> None:
        conns = [*shared.jumps, shared.conn] if shared.conn is not None else shared.jumps
        shared.conn, shared.sftp, shared.jumps = None, None, []
        await jump_connect.close_async(conns)

    async def close(self) -> None:
        """Close this conn id's shared connection in this loop (the next call reconnects)."""
        key = (self.ssh_conn_id, id(asyncio.get_running_loop()))
        shared = self._shared.pop(key, None)
        if shared is not None:
            await self._drop(shared)

    async def _with_conn(self, fn: Callable[[Any], Awaitable[T]], *, retry: bool = True) -> T:
        """Run ``fn(conn)``; when the connection turns out dead, reconnect and (if ``retry``) rerun."""
        shared = self.shared
        conn = await self.get_conn()
        try:
            async with shared.channels:
                return await fn(conn)
        except (
            asyncssh.ConnectionLost,
            asyncssh.ChannelOpenError,
            asyncssh.DisconnectError,
            BrokenPipeError,
        ) as exc:
            log.warning("SSH %s dropped (%s); reconnecting", self._where(), exc)
            async with shared.lock:
                if shared.conn is conn:
                    await self._drop(shared)
            if not retry:
                raise SlurmConnectionError(f"SSH {self._where()} dropped during a command: {exc}") from exc
            conn = await self.get_conn()
            async with shared.channels:
                return await fn(conn)

    async def run(
        self, command: str, *, stdin: str | None = None, limit_s: float | None = None
    ) -> CommandResult:
        """Run one remote command over the shared connection (``limit_s`` overrides cmd_timeout)."""
        return await self._run(command, stdin=stdin, limit_s=limit_s, retry=True)

    async def _run(
        self, command: str, *, stdin: str | None, limit_s: float | None, retry: bool
    ) -> CommandResult:
        limit = self.cmd_timeout if limit_s is None else limit_s

        async def call(conn: Any) -> CommandResult:
            self.shared.commands_run += 1
            try:
                proc = await conn.run(command, input=stdin, check=False, timeout=limit)
            except asyncssh.TimeoutError as exc:
                raise SlurmCommandError(f"remote command timed out after {limit:g} s: {command}") from exc
            status = proc.exit_status if proc.exit_status is not None else 255
            return CommandResult(status, _text(proc.stdout), _text(proc.stderr))

        return await self._with_conn(call, retry=retry)

    async def _checked(self, command: str, what: str) -> CommandResult:
        result = await self.run(command)
        parsers.check_command(command, result.exit_status, result.stdout, result.stderr, what)
        return result

    # -- Slurm verbs -----------------------------------------------------------------------------

    async def submit(self, **args: Unpack[commands.SubmitArgs]) -> str:
        """As ``SlurmHook.submit``. Never re-sent after a dropped connection: that could submit twice."""
        plan, command = commands.prepare_submit(**args)
        if plan.upload is not None:
            await self.write_text(plan.upload, str(args.get("script")))
        result = await self._run(command, stdin=plan.stdin, limit_s=None, retry=False)
        job = parsers.submitted_job(command, result.exit_status, result.stdout, result.stderr)
        log.info("[slurm %s] submitted over %s: %s", job, self._where(), command)
        return job

    async def job_states(self, job_ids: Sequence[str], watch: Sequence[str] = ()) -> JobStates:
        """As ``SlurmHook.job_states``: one remote command, pending reasons and estimates included."""
        ids = commands.job_ids(job_ids) if job_ids else []
        if not ids:
            return JobStates(records={}, source="none", authoritative=True)
        paths = list(dict.fromkeys(watch))
        command = commands.job_states(ids, watch=bool(paths))
        result = await self.run(command, stdin=commands.watch_input(paths) if paths else None)
        parsers.check_command(command, result.exit_status, result.stdout, result.stderr, "job-state query")
        return parsers.parse_job_states(result.stdout, result.stderr, ids, paths)

    async def find_active_jobs(self, name: str) -> list[JobRecord]:
        command = commands.find_active(name)
        result = await self._checked(command, f"squeue --name={name}")
        return [r for r in parsers.parse_squeue(result.stdout) if r.state in ACTIVE_STATES]

    async def cancel(
        self, job_id: str, signal: str | None = None, *, marker: str | None = None, reason: str = ""
    ) -> None:
        """scancel; with ``marker``, first write ``reason`` there (see ``commands.scancel_marked``)."""
        command = commands.cancel(job_id, signal, marker=marker, reason=reason)
        await self._checked(command, f"scancel {job_id}")
        log.info("[slurm %s] %s", job_id, "cancelled" if signal is None else f"sent {signal}")

    # -- files (SFTP) ----------------------------------------------------------------------------

    async def _sftp(self, path: str, fn: Callable[[Any], Awaitable[T]]) -> T:
        async def call(conn: Any) -> T:
            shared = self.shared
            if shared.sftp is None:
                shared.sftp = await conn.start_sftp_client()
            return await fn(shared.sftp)

        try:
            return await self._with_conn(call)
        except asyncssh.SFTPNoSuchFile as exc:
            raise RemotePathNotFoundError(path, self._where()) from exc
        except asyncssh.SFTPError as exc:
            raise SlurmCommandError(f"SFTP over {self._where()} failed for {path}: {exc.reason}") from exc

    async def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        async def read(sftp: Any) -> LogChunk:
            async with sftp.open(path, "rb") as fh:
                size = (await fh.stat()).size or 0
                start, count = log_window.read_window(path, size, offset, max_bytes)
                await fh.seek(start)
                data = await fh.read(count) if count else b""
            return log_window.decode_chunk(data, start, at_eof=start + len(data) >= size)

        return await self._sftp(path, read)

    async def stat(self, path: str) -> RemoteStat:
        try:
            attrs = await self._sftp(path, lambda sftp: sftp.stat(path))
        except RemotePathNotFoundError:
            return RemoteStat(path=path, exists=False)
        is_dir = attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY
        return RemoteStat(
            path=path, exists=True, is_dir=is_dir, size=attrs.size or 0, mtime=float(attrs.mtime or 0)
        )

    async def list_dir(self, path: str) -> list[str]:
        names: list[str] = await self._sftp(path, lambda sftp: sftp.listdir(path))
        return sorted(n for n in names if n not in (".", ".."))

    async def read_text(self, path: str) -> str:
        async def read(sftp: Any) -> str:
            async with sftp.open(path, "rb") as fh:
                data: bytes = await fh.read()
            return data.decode(errors="replace")

        return await self._sftp(path, read)

    async def write_text(self, path: str, text: str) -> None:
        """Write ``path`` atomically (temporary file + rename), creating its folder."""
        await self._upload(path, text.encode())

    async def upload_file(self, local: str | Path, remote: str) -> None:
        local = Path(local)
        if not local.is_file():
            raise FileNotFoundError(f"local file to upload not found: {local}")
        await self._upload(remote, await asyncio.to_thread(local.read_bytes))

    async def _upload(self, path: str, data: bytes) -> None:
        folder = posixpath.dirname(path)
        if folder:
            await self._checked(commands.mkdir_p(folder), f"mkdir -p {folder}")
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"

        async def put(sftp: Any) -> None:
            async with sftp.open(tmp, "wb") as fh:
                await fh.write(data)
            await sftp.posix_rename(tmp, path)

        await self._sftp(path, put)


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
