"""``-f KEY=VALUE`` overrides: YAML-scalar values, dotted paths into nested keys and labelled lists."""

from __future__ import annotations

from collections.abc import Sequence

from autoexp.config.errors import ConfigError
from autoexp.config.substitute import close_matches
from autoexp.config.yamlio import YMap, YNode, YSeq, parse_scalar_text


def apply_overrides(root: YMap, overrides: Sequence[str]) -> None:
    """Apply each ``KEY=VALUE`` to ``root`` in place, in order.

    Unlike AutoExperiment (whose ``-f`` values are always strings and whose keys are top-level
    only), VALUE is parsed as YAML (``5e-4`` is a float, ``[1, 2]`` a list) and KEY may be a dotted
    path (``PHASE.COOLDOWN.COOLDOWN_FRACTION``; a list of labelled items is entered by label, a plain
    list by index). A key that does not exist yet is appended to its mapping, so by document order it
    overrides earlier definitions of the same name, exactly as AutoExperiment's ``cfg[key] = value``.
    """
    for number, text in enumerate(overrides, start=1):
        origin = f"<-f {text}>"
        key, sep, value_text = text.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(origin, 1, "", "an override must look like KEY=VALUE (for example LR=5e-4)")
        value = parse_scalar_text(value_text, origin)
        _mark(value, -number)  # negative lines point at the override (see Config.locate)
        _set(root, key.split("."), value, origin, key)


def _set(root: YMap, parts: list[str], value: YNode, origin: str, key: str) -> None:
    node: YNode = root
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        walked = ".".join(parts[: depth + 1])
        if isinstance(node, YMap):
            index = node.index(part)
            if last:
                if index >= 0:
                    k, _, _ = node.entries[index]
                    node.entries[index] = (k, value.line, value)
                else:
                    node.entries.append((part, value.line, value))
                return
            if index < 0:
                hint = close_matches(part, [k for k, _, _ in node.entries])
                raise ConfigError(origin, 1, walked, f"no such key to descend into{hint}")
            node = node.entries[index][2]
        elif isinstance(node, YSeq):
            position = _list_position(node, part)
            if position is None:
                labels = [i.entries[0][0] for i in node.items if isinstance(i, YMap) and len(i.entries) == 1]
                hint = close_matches(part, labels)
                raise ConfigError(origin, 1, walked, f"no list item labelled or numbered {part!r}{hint}")
            item = node.items[position]
            if isinstance(item, YMap) and len(item.entries) == 1 and item.entries[0][0] == part:
                if last:
                    item.entries[0] = (part, value.line, value)
                    return
                node = item.entries[0][2]
            elif last:
                node.items[position] = value
                return
            else:
                node = item
        else:
            raise ConfigError(origin, 1, walked, f"cannot descend into a plain value to set {key}")


def _mark(node: YNode, line: int) -> None:
    node.line = line
    if isinstance(node, YSeq):
        for item in node.items:
            _mark(item, line)
    elif isinstance(node, YMap):
        node.entries = [(k, line, v) for k, _, v in node.entries]
        for _, _, v in node.entries:
            _mark(v, line)


def _list_position(node: YSeq, part: str) -> int | None:
    for i, item in enumerate(node.items):
        if isinstance(item, YMap) and len(item.entries) == 1 and item.entries[0][0] == part:
            return i
    if part.isdigit() and int(part) < len(node.items):
        return int(part)
    return None
