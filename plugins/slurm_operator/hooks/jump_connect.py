"""Open a connection along a ``Route``, hop by hop, with paramiko (workers) or asyncssh (triggerer).

Each hop is its own SSH connection, tunnelled through the previous one, with its host key checked
against the route's known_hosts (RejectPolicy: an unknown key is a failure, never added). A failure
names the hop. The caller owns the returned connections and closes them target first.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Any

import asyncssh
import paramiko

from slurm_operator.hooks.ssh_route import (
    CERT_SUFFIX,
    Hop,
    Route,
    certificate_status,
    hop_failure,
    host_key_reason,
    host_keys,
    known_hosts_text,
)

KEEPALIVE_S = 30


def _paramiko_reason(route: Route, hop: Hop, exc: BaseException, keys: paramiko.HostKeys) -> tuple[str, bool]:
    """(words for the user, whether retrying may help)."""
    if isinstance(exc, paramiko.BadHostKeyException) or (
        isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc)
    ):
        return host_key_reason(route, hop, keys), False
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed for {hop.user} (key or certificate refused)", False
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return "connection refused (sshd down or wrong port)", True
    if isinstance(exc, socket.gaierror):
        return f"unknown host name ({exc})", False
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out (host unreachable?)", True
    if isinstance(exc, paramiko.ChannelException):
        return f"the previous hop could not forward to it ({exc.text})", True
    return f"{type(exc).__name__}: {exc}", isinstance(exc, EOFError | ConnectionError | paramiko.SSHException)


def open_sync(route: Route) -> list[paramiko.SSHClient]:
    """One client per hop, the target's last (tunnelled through the others)."""
    certificate_status(route.key_file)
    keys = host_keys(route)
    hops = [*route.jumps, route.target]
    clients: list[paramiko.SSHClient] = []
    sock: Any = None
    try:
        for index, hop in enumerate(hops):
            client = paramiko.SSHClient()
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
            for name in keys:
                for kind, key in keys[name].items():
                    client.get_host_keys().add(name, kind, key)
            clients.append(client)
            try:
                if index > 0:
                    transport = clients[-2].get_transport()
                    assert transport is not None
                    sock = transport.open_channel(
                        "direct-tcpip", (hop.host, hop.port), ("127.0.0.1", 0), timeout=route.timeout
                    )
                client.connect(hop.host, hop.port, hop.user, sock=sock, timeout=route.timeout,
                               banner_timeout=route.timeout, auth_timeout=route.timeout,
                               **_paramiko_keys(route), allow_agent=False, look_for_keys=False)  # fmt: skip
            except Exception as exc:
                reason, transient = _paramiko_reason(route, hop, exc, keys)
                raise hop_failure(route, hop, reason, transient=transient) from exc
            transport = client.get_transport()
            assert transport is not None
            transport.set_keepalive(KEEPALIVE_S)
    except BaseException:
        for client in reversed(clients):
            client.close()
        raise
    return clients


def _paramiko_keys(route: Route) -> dict[str, Any]:
    """The bare key, then (by file name, which makes paramiko load ``-cert.pub``) its certificate: a
    hop that trusts only the CA takes the second, one with the key in authorized_keys the first."""
    if not route.key_file:
        return {}
    if not os.path.isfile(route.key_file + CERT_SUFFIX):
        return {"key_filename": route.key_file}
    bare = paramiko.PKey.from_path(route.key_file)
    bare.public_blob = None  # from_path attaches the certificate; this one is offered without it
    return {"pkey": bare, "key_filename": route.key_file}


def _asyncssh_reason(route: Route, hop: Hop, exc: BaseException, keys: paramiko.HostKeys) -> tuple[str, bool]:
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return host_key_reason(route, hop, keys), False
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"authentication failed for {hop.user} (key or certificate refused)", False
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (sshd down or wrong port)", True
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timed out (host unreachable?)", True
    if isinstance(exc, asyncssh.ChannelOpenError):
        return f"the previous hop could not forward to it ({exc.reason})", True
    return f"{type(exc).__name__}: {exc}", isinstance(exc, OSError | asyncssh.ConnectionLost)


async def open_async(route: Route) -> list[asyncssh.SSHClientConnection]:
    """As ``open_sync``, with asyncssh (which offers ``-cert.pub`` first, then the bare key)."""
    certificate_status(route.key_file)
    keys = host_keys(route)
    trusted = asyncssh.import_known_hosts(known_hosts_text(keys))
    conns: list[asyncssh.SSHClientConnection] = []
    try:
        for hop in [*route.jumps, route.target]:
            try:
                conn = await asyncio.wait_for(
                    asyncssh.connect(
                        hop.host,
                        hop.port,
                        tunnel=conns[-1] if conns else (),
                        username=hop.user,
                        known_hosts=trusted,
                        client_keys=[route.key_file] if route.key_file else (),
                        agent_path=None,
                        config=None,
                        keepalive_interval=KEEPALIVE_S,
                    ),
                    route.timeout,
                )
            except Exception as exc:
                reason, transient = _asyncssh_reason(route, hop, exc, keys)
                raise hop_failure(route, hop, reason, transient=transient) from exc
            conns.append(conn)
    except BaseException:
        await close_async(conns)
        raise
    return conns


async def close_async(conns: list[asyncssh.SSHClientConnection]) -> None:
    """Close the target first, then each jump (bounded: a dead peer must not hang the triggerer)."""
    for conn in reversed(conns):
        conn.close()
        with contextlib.suppress(TimeoutError, OSError, asyncssh.Error):
            await asyncio.wait_for(conn.wait_closed(), 5)
