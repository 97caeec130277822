"""Both hooks reach the real local cluster through a jump host (a second local sshd that lets in only
certificates its CA signed), check the host key of each hop, and read a renewed certificate at the next
reconnect without a new hook."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.hooks.ssh_route import RouteError, certificate_status, parse_jumps
from slurm_operator.model.exceptions import SlurmConnectionError

from tests.fixtures.jump_host import JumpHost
from tests.fixtures.scripts import free_ports

pytestmark = pytest.mark.slurm

ENV = "AIRFLOW_CONN_SLURM_JUMP"


def _connect_s(conn_id: str) -> tuple[float, SlurmHook]:
    hook = SlurmHook(conn_id, connect_retries=0)
    start = time.perf_counter()
    assert hook.run("true").exit_status == 0
    return time.perf_counter() - start, hook


def test_sync_hook_goes_through_the_jump_host(jump_host: JumpHost, figure: Callable[[str], None]) -> None:
    before = jump_host.forwarded()
    jump_s, hook = _connect_s(jump_host.conn_id)
    with hook:
        result = hook.run("sinfo --version")
        assert result.exit_status == 0, result
        assert result.stdout.startswith("slurm"), result
        assert hook.connections_opened == 1  # one long-lived connection, every command over it
        hops = f"jump host 127.0.0.1:{jump_host.port}, login host 127.0.0.1:{jump_host.cluster.ssh_port}"
        assert hook.route_note.startswith(f"host key checked on {hops}; certificate valid until ")
    assert jump_host.forwarded() == before + 1
    direct_s, direct = _connect_s(jump_host.cluster.conn_id)
    direct.close()
    figure(f"first command incl. connect: direct {direct_s:.3f} s, through the jump host {jump_s:.3f} s")


def test_renewed_certificate_is_read_at_the_next_reconnect(
    jump_host: JumpHost, figure: Callable[[str], None]
) -> None:
    with SlurmHook(jump_host.conn_id, connect_retries=0) as hook:
        assert hook.run("true").exit_status == 0
        jump_host.sign("20200101:20200102", serial=2)  # an expired one, as after a missed renewal
        hook.close()
        with pytest.raises(SlurmConnectionError) as expired:
            hook.run("true")
        assert str(expired.value) == (
            f"certificate {jump_host.cert_file} expired at 2020-01-02 00:00 UTC; "
            "renew it (the next connect reads it)"
        )
        jump_host.sign(serial=3)
        hook.close()  # what a dropped connection does: the next command reconnects
        start = time.perf_counter()
        assert hook.run("true").exit_status == 0
        took = time.perf_counter() - start
        figure(f"reconnect through the jump host after a certificate renewal: {took:.3f} s")
        assert hook.connections_opened == 2
    assert "ID autoexp-test-3 (serial 3)" in jump_host.log_file.read_text()


def test_each_hop_host_key_is_checked(
    jump_host: JumpHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = jump_host.cluster
    known = tmp_path / "known_hosts"
    known.write_text(cluster.known_hosts.read_text())  # the cluster's key only
    monkeypatch.setenv(ENV, jump_host.conn_json(known_hosts=str(known)))
    with pytest.raises(SlurmConnectionError) as missing:
        SlurmHook(jump_host.conn_id, connect_retries=0).run("true")
    assert (
        str(missing.value) == f"jump host 127.0.0.1:{jump_host.port}: host key not in known_hosts ({known})"
    )

    other = (jump_host.base_dir / "ca.pub").read_text().split()[:2]  # some other ed25519 key
    known.write_text(f"[127.0.0.1]:{jump_host.port} {' '.join(other)}\n{cluster.known_hosts.read_text()}")
    with pytest.raises(SlurmConnectionError, match=r"^jump host 127\.0\.0\.1:\d+: host key does not match"):
        SlurmHook(jump_host.conn_id, connect_retries=0).run("true")

    known.write_text(f"{jump_host.host_line}\n")  # the jump host's; the cluster's pinned wrongly
    monkeypatch.setenv(ENV, jump_host.conn_json(known_hosts=str(known), host_key=" ".join(other)))
    with pytest.raises(SlurmConnectionError) as target:
        SlurmHook(jump_host.conn_id, connect_retries=0).run("true")
    assert str(target.value).startswith(f"login host 127.0.0.1:{cluster.ssh_port}: host key does not match")


async def test_a_direct_connection_offers_the_certificate_and_reads_a_renewal(
    jump_host: JumpHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No jump: the SSH provider's path, to a host that trusts only the CA (the jump sshd itself)."""
    conn = json.loads(
        jump_host.conn_json(proxy_jump=None, host_key=" ".join(jump_host.host_line.split()[1:]))
    )
    conn["port"] = jump_host.port
    monkeypatch.setenv(ENV, json.dumps(conn))
    with SlurmHook(jump_host.conn_id, connect_retries=0) as hook:
        assert hook.run("true").exit_status == 0
        jump_host.sign("20200101:20200102", serial=6)
        hook.close()
        with pytest.raises(SlurmConnectionError, match=r"^certificate .* expired at 2020-01-02 00:00 UTC"):
            hook.run("true")
        jump_host.sign(serial=7)
        hook.close()
        assert hook.run("true").exit_status == 0
    async_hook = AsyncSlurmHook(jump_host.conn_id, reconnect_attempts=0)
    try:
        assert (await async_hook.run("true")).exit_status == 0
        assert async_hook.shared.jumps == []
    finally:
        await async_hook.close()
    log = jump_host.log_file.read_text()
    assert "ID autoexp-test-7 (serial 7)" in log
    assert log.count("ID autoexp-test-7 (serial 7)") >= 2  # the sync and the async connection


def test_a_jump_host_that_is_down_is_named(jump_host: JumpHost, monkeypatch: pytest.MonkeyPatch) -> None:
    (port,) = free_ports(1)  # nothing listens there
    monkeypatch.setenv(ENV, jump_host.conn_json(proxy_jump=f"{jump_host.cluster.ssh_user}@127.0.0.1:{port}"))
    with pytest.raises(SlurmConnectionError) as down:
        SlurmHook(jump_host.conn_id, connect_retries=1).run("true")  # retried once: it may come back
    assert str(down.value) == f"jump host 127.0.0.1:{port}: connection refused (sshd down or wrong port)"


def test_proxy_jump_from_an_ssh_config_file(
    jump_host: JumpHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host gateway\n  HostName 127.0.0.1\n  Port {jump_host.port}\n  User {jump_host.cluster.ssh_user}\n"
        "Host 127.0.0.1\n  ProxyJump gateway\n"
    )
    monkeypatch.setenv(ENV, jump_host.conn_json(proxy_jump=None, ssh_config=str(config)))
    before = jump_host.forwarded()
    _, hook = _connect_s(jump_host.conn_id)
    hook.close()
    assert jump_host.forwarded() == before + 1


async def test_async_hook_goes_through_the_jump_host_and_reads_a_renewal(jump_host: JumpHost) -> None:
    hook = AsyncSlurmHook(jump_host.conn_id, reconnect_attempts=0)
    try:
        before = jump_host.forwarded()
        assert (await hook.run("sinfo --version")).stdout.startswith("slurm")
        assert (await hook.run("true")).exit_status == 0
        assert hook.shared.connections_opened == 1
        assert len(hook.shared.jumps) == 1
        assert jump_host.forwarded() == before + 1
        jump_host.sign("20200101:20200102", serial=4)
        await hook.close()
        with pytest.raises(SlurmConnectionError, match=r"^certificate .* expired at 2020-01-02 00:00 UTC"):
            await hook.run("true")
        jump_host.sign(serial=5)
        await hook.close()
        assert (await hook.run("true")).exit_status == 0
    finally:
        await hook.close()
    assert "ID autoexp-test-5 (serial 5)" in jump_host.log_file.read_text()


def test_jump_specs_parse_and_bad_ones_name_the_extra() -> None:
    hops = parse_jumps("alice@j1.example:2222, j2.example,[::1]:23", "bob")
    assert [(h.user, h.host, h.port) for h in hops] == [
        ("alice", "j1.example", 2222),
        ("bob", "j2.example", 22),
        ("bob", "::1", 23),
    ]
    with pytest.raises(RouteError, match=r"^proxy_jump: 'a@j:x' is not user@host\[:port\]$"):
        parse_jumps("a@j:x", "bob")


def test_no_certificate_is_no_status(tmp_path: Path) -> None:
    assert certificate_status(str(tmp_path / "id_ed25519")) is None
    assert certificate_status(None) is None
