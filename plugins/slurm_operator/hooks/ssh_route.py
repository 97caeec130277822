"""The SSH route of a connection: jump hosts, the key with its certificate, and host keys on every hop.

Connection extras read here (next to the SSH provider's ``key_file``, ``host_key``, ``conn_timeout``):

- ``proxy_jump``: ``"user@jump.example:22"`` or several hops, comma-separated (OpenSSH's ProxyJump
  syntax); a hop without ``user@`` logs in as the connection's login, one without ``:port`` on 22.
- ``ssh_config``: an ssh config file whose ``ProxyJump`` for the connection's host is used when
  ``proxy_jump`` is not set (its ``HostName``/``Port``/``User`` for a jump alias are honoured).
- ``known_hosts``: the known_hosts file every hop is checked against (default ``~/.ssh/known_hosts``);
  the target host may instead be pinned by ``host_key``. ``no_host_key_check`` is refused here.

A ``<key_file>-cert.pub`` next to the key is offered first, then the bare key (as OpenSSH does). Key,
certificate and known_hosts are read at each connect, so a renewed certificate is used on the next
reconnect without restarting anything; an expired one fails before connecting, in one line.
"""

from __future__ import annotations

import base64
import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import paramiko

from slurm_operator.model.exceptions import SlurmConnectionError

CERT_SUFFIX = "-cert.pub"


class RouteError(SlurmConnectionError):
    """One hop could not be reached; ``transient`` when retrying may help (refused, reset, timeout)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class Hop:
    """One SSH server on the way: who logs in, where."""

    user: str
    host: str
    port: int = 22

    @property
    def label(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts lists this server under (OpenSSH writes ``[host]:port`` off port 22)."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"


@dataclass(frozen=True)
class Route:
    """How to reach the target: through ``jumps`` in order, with one key, checking every host key.

    :param host_key: the target's pinned key (``"ssh-ed25519 AAAA..."``), from the ``host_key`` extra.
    """

    jumps: tuple[Hop, ...]
    target: Hop
    key_file: str | None
    known_hosts: str
    host_key: str | None
    timeout: float

    def role(self, hop: Hop) -> str:
        return "jump host" if hop in self.jumps else "login host"


def parse_jumps(spec: str, default_user: str, config: paramiko.SSHConfig | None = None) -> tuple[Hop, ...]:
    """``"a@j1:2222,j2"`` → hops; a bad entry raises one line naming the extra."""
    hops = []
    for raw in spec.split(","):
        item = raw.strip()
        user, _, hostport = item.rpartition("@")
        host, port_text = hostport, ""
        if hostport.startswith("["):  # [::1]:22
            host, _, rest = hostport[1:].partition("]")
            port_text = rest.removeprefix(":")
        elif hostport.count(":") == 1:
            host, port_text = hostport.split(":")
        if not host or (port_text and not port_text.isdigit()):
            raise RouteError(f"proxy_jump: {item!r} is not user@host[:port]")
        port = int(port_text) if port_text else None
        if config is not None:  # a jump named by its ssh-config alias
            found = config.lookup(host)
            host = found.get("hostname", host)
            port = port or int(found.get("port", 22))
            user = user or found.get("user", "")
        hops.append(Hop(user or default_user, host, port or 22))
    return tuple(hops)


def route_for(conn: Any, *, direct: bool = False) -> Route | None:
    """The route of an Airflow connection, or None when it names no jump host (a direct connection);
    with ``direct``, a direct connection's route too (no jumps, its host key checked the same way)."""
    extra: Mapping[str, Any] = conn.extra_dejson or {}
    user = conn.login or ""
    spec = str(extra.get("proxy_jump") or "").strip()
    config = None
    if extra.get("ssh_config"):
        path = os.path.expanduser(str(extra["ssh_config"]))
        try:
            config = paramiko.SSHConfig.from_path(path)
        except OSError as exc:
            raise RouteError(f"ssh_config {path}: {exc.strerror}") from exc
        spec = spec or str(config.lookup(conn.host).get("proxyjump", "")).strip()
    named = bool(spec) and spec.lower() != "none"  # a jump host named (ssh_config's "none": no jump)
    if not named and not direct:
        return None
    if str(extra.get("no_host_key_check", "false")).lower() == "true":
        raise RouteError("no_host_key_check is refused with a jump host: host keys are checked on every hop")
    key_file = extra.get("key_file")
    return Route(
        jumps=parse_jumps(spec, user, config) if named else (),
        target=Hop(user, conn.host, int(conn.port or 22)),
        key_file=os.path.expanduser(str(key_file)) if key_file else None,
        known_hosts=os.path.expanduser(str(extra.get("known_hosts") or "~/.ssh/known_hosts")),
        host_key=" ".join(str(extra["host_key"]).split()[:2]) if extra.get("host_key") else None,
        timeout=float(extra.get("conn_timeout") or 10),
    )


# -- certificates ---------------------------------------------------------------------------------


def certificate_validity(cert_path: str) -> tuple[int, int]:
    """(valid_after, valid_before) in epoch seconds from an OpenSSH certificate file."""
    with open(cert_path) as fh:
        blob = base64.b64decode(fh.read().split()[1])
    msg = paramiko.Message(blob)
    kind = msg.get_text()
    msg.get_string()  # nonce
    fields = {"ssh-ed25519": 1, "ssh-rsa": 2, "ecdsa-sha2": 2}
    count = next((n for prefix, n in fields.items() if kind.startswith(prefix)), None)
    if count is None:
        raise ValueError(f"unsupported certificate type {kind}")
    for _ in range(count):
        msg.get_string()
    msg.get_int64()  # serial
    msg.get_int()  # user or host certificate
    msg.get_string()  # key id
    msg.get_string()  # principals
    return msg.get_int64(), msg.get_int64()


def _utc(seconds: int) -> str:
    if seconds >= 2**63:
        return "forever"
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def certificate_status(key_file: str | None, now: float | None = None) -> str | None:
    """``"valid until ..."`` for the certificate next to ``key_file`` (None without one); raises
    RouteError, in one line, when it is expired or not yet valid, so no hop is tried with it."""
    if not key_file or not os.path.isfile(key_file + CERT_SUFFIX):
        return None
    path = key_file + CERT_SUFFIX
    try:
        after, before = certificate_validity(path)
    except (OSError, IndexError, ValueError, paramiko.SSHException) as exc:
        raise RouteError(f"certificate {path} is unreadable: {exc}") from exc
    now = datetime.datetime.now(datetime.timezone.utc).timestamp() if now is None else now
    if now >= before:
        raise RouteError(
            f"certificate {path} expired at {_utc(before)}; renew it (the next connect reads it)"
        )
    if now < after:
        raise RouteError(f"certificate {path} is valid only from {_utc(after)}")
    return f"certificate valid until {_utc(before)}"


# -- host keys ------------------------------------------------------------------------------------


def host_keys(route: Route) -> paramiko.HostKeys:
    """The known_hosts file (read now, so an edit counts at the next connect) plus the pinned key."""
    keys = paramiko.HostKeys()
    if os.path.isfile(route.known_hosts):
        keys.load(route.known_hosts)
    if route.host_key:
        entry = paramiko.hostkeys.HostKeyEntry.from_line(f"{route.target.known_hosts_name} {route.host_key}")
        if entry is not None and entry.key is not None:
            keys.add(route.target.known_hosts_name, entry.key.get_name(), entry.key)
    return keys


def known_hosts_text(keys: paramiko.HostKeys) -> str:
    """The same keys as known_hosts text, for asyncssh."""
    lines = []
    for name in keys:
        for kind, key in keys[name].items():
            lines.append(f"{name} {kind} {key.get_base64()}")
    return "\n".join(lines) + "\n"


def host_key_reason(route: Route, hop: Hop, keys: paramiko.HostKeys) -> str:
    """Why a hop's host key was refused: missing from known_hosts, or a different one."""
    if keys.lookup(hop.known_hosts_name) is None:
        return f"host key not in known_hosts ({route.known_hosts})"
    return f"host key does not match known_hosts ({route.known_hosts}): possible MITM or re-keyed host"


def hop_failure(route: Route, hop: Hop, reason: str, *, transient: bool = False) -> RouteError:
    return RouteError(f"{route.role(hop)} {hop.label}: {reason}", transient=transient)
