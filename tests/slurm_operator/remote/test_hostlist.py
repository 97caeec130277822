"""Slurm's hostlist expressions as sacct prints them in NodeList."""

from __future__ import annotations

import pytest
from slurm_operator.remote.hostlist import expand


@pytest.mark.parametrize(
    ("text", "nodes"),
    [
        ("n1", ["n1"]),
        ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
        ("a[1-2]-ib,login1", ["a1-ib", "a2-ib", "login1"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("n1,n1", ["n1"]),
        ("", []),
        ("None assigned", []),  # a job that never started
        ("n[a-b]", []),  # unreadable: never a guess
        ("n[1-200000]", []),  # not one job's nodes
        ("n1;rm -rf /", []),
    ],
)
def test_expand(text: str, nodes: list[str]) -> None:
    assert expand(text) == nodes
