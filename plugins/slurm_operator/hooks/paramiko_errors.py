"""What a paramiko connection failure means, in words a user can act on; which ones a retry may fix."""

from __future__ import annotations

import socket

import paramiko

# Errors worth a reconnect: the network or the sshd went away. A wrong key or host key is not.
TRANSIENT = (
    EOFError,
    ConnectionError,
    socket.timeout,
    TimeoutError,
    paramiko.ssh_exception.NoValidConnectionsError,
)


def describe_connect_error(exc: BaseException) -> str:
    """Say which of the usual SSH faults this is, in words a user can act on."""
    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"the host key does not match the connection's host_key (possible MITM or re-keyed host): {exc}"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        return f"authentication failed (wrong key or user): {exc}"
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
        return f"unknown host key (set the connection's host_key extra): {exc}"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError | ConnectionRefusedError):
        return f"connection refused (sshd down or wrong port): {exc}"
    if isinstance(exc, socket.gaierror):
        return f"unknown host name: {exc}"
    if isinstance(exc, socket.timeout | TimeoutError):
        return f"timed out (host unreachable?): {exc}"
    return f"{type(exc).__name__}: {exc}"
