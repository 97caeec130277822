"""Grid expansion exactly like AutoExperiment's ``product_recursive``, with line numbers and strict errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain, product

from autoexp.config.errors import ConfigError
from autoexp.config.yamlio import Scalar, YNode, YScalar, YSeq


@dataclass(frozen=True, slots=True)
class Leaf:
    """One path of an assignment: the keys from the top, each key's line, the value and its line.

    ``writes`` is what the path assigns in the flat namespace, as ``(name, value, line)``: each key
    takes the next key as its value (at that key's line) and the last key takes the leaf value.
    """

    keys: tuple[str, ...]
    key_lines: tuple[int, ...]
    value: Scalar
    line: int
    writes: tuple[tuple[str, Scalar, int], ...] = ()

    @staticmethod
    def make(keys: tuple[str, ...], key_lines: tuple[int, ...], value: Scalar, line: int) -> Leaf:
        writes: tuple[tuple[str, Scalar, int], ...] = tuple(
            (keys[i], keys[i + 1], key_lines[i + 1]) for i in range(len(keys) - 1)
        )
        if keys:
            writes += ((keys[-1], value, line),)
        return Leaf(keys, key_lines, value, line, writes)


Assignment = tuple[Leaf, ...]
Point = tuple[dict[str, Scalar], dict[str, int]]  # one job's flat params and each one's line


def expand_grid(root: YNode, locate: Callable[[int], tuple[str, int]]) -> tuple[list[Point], list[str]]:
    """Every point of the grid, first YAML key varying slowest, and the grid's axes (the keys whose
    values are lists) in document order; ``locate`` turns a node line into an error's place."""
    expander = GridExpander(locate)
    return [flatten(a) for a in expander.expand(root)], list(expander.axes)


class GridExpander:
    """Expands a YAML tree into assignments; ``axes`` collects every key whose value is a list."""

    def __init__(self, locate: Callable[[int], tuple[str, int]]) -> None:
        self.locate = locate
        self.axes: dict[str, None] = {}

    def _error(self, line: int, path: str, message: str) -> ConfigError:
        file, number = self.locate(line)
        return ConfigError(file, number, path, message)

    def expand(self, node: YNode, path: str = "") -> list[Assignment]:
        if isinstance(node, YScalar):
            if node.value is None:
                raise self._error(
                    node.line,
                    path,
                    'null value; AutoExperiment cannot expand it (write "" for empty)',
                )
            return [(Leaf((), (), node.value, node.line),)]
        if isinstance(node, YSeq):
            return self._expand_list(node, path)
        # A mapping is the cartesian product of its children, first key varying slowest.
        per_key: list[list[Assignment]] = []
        for key, key_line, child in node.entries:
            if isinstance(child, YSeq):
                self.axes.setdefault(key, None)
            child_path = f"{path}.{key}" if path else key
            per_key.append([_prefix(key, key_line, a) for a in self.expand(child, child_path)])
        return [tuple(chain.from_iterable(combo)) for combo in product(*per_key)]

    def _expand_list(self, node: YSeq, path: str) -> list[Assignment]:
        if not node.items:
            raise self._error(node.line, path, "empty list: it makes the whole grid empty (0 jobs)")
        scalars = [item for item in node.items if isinstance(item, YScalar)]
        if len(scalars) == len(node.items):
            for i, item in enumerate(scalars):
                if item.value is None:
                    raise self._error(
                        item.line, f"{path}[{i}]", 'null list item (write "" for an empty string)'
                    )
            return [(Leaf((), (), item.value, item.line),) for item in scalars]  # type: ignore[arg-type]
        # A list of single-key mappings is a labelled union: branches are concatenated.
        result: list[Assignment] = []
        for i, entry in enumerate(node.items):
            if isinstance(entry, YScalar):
                raise self._error(
                    entry.line,
                    f"{path}[{i}]",
                    "list mixes plain values and mappings; use a plain list of values (an axis) "
                    "or a list of single-key mappings (labelled branches), not both",
                )
            if isinstance(entry, YSeq):
                raise self._error(
                    entry.line,
                    f"{path}[{i}]",
                    "a list item is itself a list; nested lists are not allowed",
                )
            if len(entry.entries) != 1:
                keys = ", ".join(k for k, _, _ in entry.entries) or "none"
                raise self._error(
                    entry.line,
                    f"{path}[{i}]",
                    f"list item has {len(entry.entries)} keys ({keys}); each item of a labelled list needs "
                    "exactly one key (a missing '-' or too much indentation?)",
                )
            label, label_line, child = entry.entries[0]
            if isinstance(child, YSeq):
                self.axes.setdefault(label, None)
            child_path = f"{path}.{label}" if path else label
            result.extend(_prefix(label, label_line, a) for a in self.expand(child, child_path))
        return result


def _prefix(key: str, key_line: int, assignment: Assignment) -> Assignment:
    return tuple(
        Leaf.make((key, *leaf.keys), (key_line, *leaf.key_lines), leaf.value, leaf.line)
        for leaf in assignment
    )


def flatten(assignment: Assignment) -> Point:
    """AutoExperiment's flat namespace: each key takes the next key as value, the last key the leaf.

    A later assignment to a name overrides an earlier one (document order), but the name keeps the
    position of its first assignment, as Python dicts do. Returns the params and each one's line.
    """
    params: dict[str, Scalar] = {}
    lines: dict[str, int] = {}
    for leaf in assignment:
        for name, value, line in leaf.writes:
            params[name] = value
            lines[name] = line
    return params, lines
