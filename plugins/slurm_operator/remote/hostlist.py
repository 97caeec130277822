"""Slurm's hostlist expressions (``gpu[01-03,07],login1``), expanded to node names; pure."""

from __future__ import annotations

import re

# A node name as Slurm prints it: what ``--exclude`` may be given; anything else is not a node
# (sacct prints ``None assigned`` for a job that never started).
NODE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Expansions beyond this are not node lists of one job (a cluster's largest jobs have thousands).
MAX_NODES = 100_000
_BRACKET = re.compile(r"^([^\[\]]*)\[([^\[\]]+)\](.*)$")


def _items(text: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_item(item: str) -> list[str]:
    m = _BRACKET.match(item)
    if m is None:
        return [item]
    prefix, ranges, rest = m.groups()
    tails = _expand_item(rest)
    names: list[str] = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            names.extend(f"{prefix}{n:0{width}d}{tail}" for tail in tails)
            if len(names) > MAX_NODES:
                return []
    return names


def expand(text: str) -> list[str]:
    """The node names of a hostlist expression, in order and once each; [] for no nodes or an
    expression this cannot read (never a guess: a wrong name would exclude a healthy node)."""
    names: dict[str, None] = {}
    for item in _items(text or ""):
        expanded = _expand_item(item)
        if not expanded or not all(NODE_NAME.match(n) for n in expanded):
            return []
        names.update(dict.fromkeys(expanded))
    return list(names)
