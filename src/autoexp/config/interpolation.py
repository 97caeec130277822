"""OmegaConf ``${...}`` interpolation, resolved before expansion exactly as AutoExperiment's loading does."""

from __future__ import annotations

from typing import Any

from autoexp.config.errors import ConfigError
from autoexp.config.yamlio import YMap, YNode, YScalar, YSeq, from_plain, to_plain


def has_interpolation(node: YNode) -> bool:
    if isinstance(node, YScalar):
        return isinstance(node.value, str) and "${" in node.value
    if isinstance(node, YSeq):
        return any(has_interpolation(i) for i in node.items)
    return any(has_interpolation(v) for _, _, v in node.entries)


def resolve_interpolations(root: YMap, file: str) -> None:
    """Replace every scalar holding ``${...}`` by OmegaConf's resolved value (in place).

    OmegaConf itself does the resolving (``${KEY}``, ``${a.b}``, ``${oc.env:HOME}``, escapes), so the
    results are AutoExperiment's. It is only imported when a config uses interpolation.
    """
    if not has_interpolation(root):
        return
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.create(to_plain(root))
    except OmegaConfBaseException as exc:
        raise ConfigError(file, root.line, "", f"OmegaConf rejects the config: {_first_line(exc)}") from None

    def walk(node: YNode, container: Any, path: str) -> YNode:
        if isinstance(node, YScalar):
            return node
        if isinstance(node, YSeq):
            for i, item in enumerate(node.items):
                node.items[i] = visit(item, container, i, f"{path}[{i}]")
            return node
        for i, (key, line, child) in enumerate(node.entries):
            child_path = f"{path}.{key}" if path else key
            node.entries[i] = (key, line, visit(child, container, key, child_path))
        return node

    def visit(node: YNode, container: Any, key: Any, path: str) -> YNode:
        if isinstance(node, YScalar):
            if not (isinstance(node.value, str) and "${" in node.value):
                return node
            try:
                value = container[key]
                if isinstance(value, DictConfig | ListConfig):
                    value = OmegaConf.to_container(value, resolve=True)
            except OmegaConfBaseException as exc:
                raise ConfigError(
                    file, node.line, path, f"interpolation failed: {_first_line(exc)}"
                ) from None
            return from_plain(value, node.line)
        return walk(node, container[key], path)

    walk(root, cfg, "")


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
