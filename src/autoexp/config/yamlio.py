"""YAML loading that keeps line numbers and types scalars exactly as OmegaConf (hence AutoExperiment) does."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from autoexp.config.errors import ConfigError

Scalar = str | int | float | bool
MAX_NODES = 200_000  # YAML aliases can expand exponentially ("billion laughs"); OmegaConf caps them too


class _Loader(yaml.SafeLoader):
    """SafeLoader with OmegaConf's resolvers: ``1e-2`` is a float, timestamps stay strings."""


# OmegaConf adds this float resolver (YAML 1.2 style: exponent without a dot) on top of the YAML 1.1
# ones and drops the timestamp resolver; we copy both changes so `1e-2`, `2_000_000_000` and
# `2024-01-01` load exactly as AutoExperiment's `OmegaConf.load` loads them.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)
_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in _Loader.yaml_implicit_resolvers.items()
}


@dataclass(slots=True)
class YScalar:
    """A scalar with the line it was written on; ``value`` None is YAML null."""

    value: Scalar | None
    line: int


@dataclass(slots=True)
class YMap:
    """A mapping in document order: ``(key, key line, value node)`` entries."""

    entries: list[tuple[str, int, YNode]] = field(default_factory=list)
    line: int = 1

    def get(self, key: str) -> YNode | None:
        for k, _, v in self.entries:
            if k == key:
                return v
        return None

    def index(self, key: str) -> int:
        for i, (k, _, _) in enumerate(self.entries):
            if k == key:
                return i
        return -1


@dataclass(slots=True)
class YSeq:
    """A sequence with the line it starts on."""

    items: list[YNode]
    line: int


YNode = YScalar | YMap | YSeq


def parse_yaml(text: str, file: str) -> YNode | None:
    """Parse one YAML document into line-annotated nodes (None for an empty document)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return _convert(loader, node, file, "", [MAX_NODES])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = exc.problem or exc.context or "unreadable"
        raise ConfigError(file, line, "", f"malformed YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(file, 1, "", f"malformed YAML: {exc}") from None
    finally:
        loader.dispose()


def parse_scalar_text(text: str, file: str) -> YNode:
    """Parse an override value: a YAML scalar (or flow list/mapping); empty text is the empty string."""
    if text.strip() == "":
        return YScalar("", 1)
    node = parse_yaml(text, file)
    return node if node is not None else YScalar(None, 1)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _convert(loader: _Loader, node: yaml.Node, file: str, path: str, budget: list[int]) -> YNode:
    line = node.start_mark.line + 1
    budget[0] -= 1
    if budget[0] < 0:
        raise ConfigError(file, line, path, f"more than {MAX_NODES} values after expanding YAML aliases")
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_object(node, deep=True)
        if value is not None and type(value) not in (str, int, float, bool):
            raise ConfigError(
                file, line, path, f"unsupported value of type {type(value).__name__} (tag {node.tag})"
            )
        return YScalar(value, line)
    if isinstance(node, yaml.SequenceNode):
        return YSeq(
            [_convert(loader, item, file, f"{path}[{i}]", budget) for i, item in enumerate(node.value)], line
        )
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                kline = key_node.start_mark.line + 1
                if key_node.value in seen:
                    raise ConfigError(
                        file,
                        kline,
                        _join(path, str(key_node.value)),
                        f"duplicate key (first defined at line {seen[key_node.value]})",
                    )
                seen[key_node.value] = kline
        loader.flatten_mapping(node)  # YAML merge keys (`<<: *base`), as OmegaConf's loader allows
        result = YMap([], line)
        for key_node, value_node in node.value:
            kline = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError(file, kline, path, "a key must be a plain scalar, not a list or mapping")
            key = loader.construct_object(key_node)
            if type(key) is not str:
                raise ConfigError(
                    file,
                    kline,
                    _join(path, str(key)),
                    f'key {key!r} is not a string ({type(key).__name__}); quote it ("{key_node.value}")',
                )
            result.entries.append((key, kline, _convert(loader, value_node, file, _join(path, key), budget)))
        return result
    raise ConfigError(file, line, path, f"unsupported YAML node {node.tag}")  # pragma: no cover


def to_plain(node: YNode) -> Any:
    """The node as plain Python data (dicts, lists, scalars, None)."""
    if isinstance(node, YScalar):
        return node.value
    if isinstance(node, YSeq):
        return [to_plain(item) for item in node.items]
    return {k: to_plain(v) for k, _, v in node.entries}


def from_plain(value: Any, line: int) -> YNode:
    """Plain Python data as nodes, every node on ``line`` (used for values produced by interpolation)."""
    if isinstance(value, dict):
        return YMap([(str(k), line, from_plain(v, line)) for k, v in value.items()], line)
    if isinstance(value, list | tuple):
        return YSeq([from_plain(v, line) for v in value], line)
    return YScalar(value, line)
