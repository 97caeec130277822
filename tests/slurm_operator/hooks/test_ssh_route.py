"""A connection's route, read from its extras (pure: no SSH)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from slurm_operator.hooks.ssh_route import Hop, route_for

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _conn(**extra: Any) -> Any:
    return SimpleNamespace(login="u", host="login.example", port=2222, extra_dejson=extra)


def test_a_direct_connection_has_no_route_unless_asked_for_one() -> None:
    assert route_for(_conn(host_key=KEY)) is None
    # Asked (the async hook, where the SSH provider would not check the host key): no jumps, same checks.
    route = route_for(_conn(host_key=f"{KEY} comment", key_file="/keys/id"), direct=True)
    assert route is not None
    assert route.jumps == ()
    assert route.target == Hop("u", "login.example", 2222)
    assert (route.host_key, route.key_file) == (KEY, "/keys/id")


def test_a_jump_host_route_is_unchanged_by_direct() -> None:
    conn = _conn(proxy_jump="j@jump.example:22", host_key=KEY)
    assert route_for(conn, direct=True) == route_for(conn)
    assert route_for(conn) is not None
