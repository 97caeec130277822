"""Loading a config: YAML with lines, overrides, interpolation, the ``airflow:`` section set apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoexp.config.builtins import BUILTIN_LINE, BUILTIN_ORIGIN, add_builtins
from autoexp.config.errors import ConfigError
from autoexp.config.interpolation import resolve_interpolations
from autoexp.config.overrides import apply_overrides
from autoexp.config.yamlio import YMap, YNode, YSeq, parse_yaml, to_plain

AIRFLOW_KEY = "airflow"


@dataclass(frozen=True)
class Config:
    """A loaded config, ready to expand.

    Parameters:
        path: the config file (absolute).
        root: the grid part of the YAML tree (the ``airflow:`` section removed), overrides applied
            and ``${...}`` resolved.
        airflow: the raw ``airflow:`` section (plain data) or None; the DAG factory validates it.
        overrides: the ``KEY=VALUE`` overrides that were applied.
    """

    path: Path
    root: YMap = field(repr=False)
    airflow: Mapping[str, Any] | None = None
    overrides: tuple[str, ...] = ()
    airflow_node: YMap | None = field(default=None, repr=False)

    @property
    def folder(self) -> Path:
        return self.path.parent

    def display_path(self) -> str:
        """The config path as given relative to the working directory when possible (for messages)."""
        try:
            return str(self.path.relative_to(Path.cwd()))
        except ValueError:
            return str(self.path)

    def locate(self, line: int) -> tuple[str, int]:
        """(file, line) for a node line; ``-f`` override values carry line -i for the i-th override."""
        if line < 0 and -line <= len(self.overrides):
            return f"<-f {self.overrides[-line - 1]}>", 1
        if line == BUILTIN_LINE:
            return BUILTIN_ORIGIN, 1
        return self.display_path(), line

    def airflow_line(self, key_path: str) -> int:
        """Line of ``key_path`` inside the airflow section (``"default_args.retries"``); "" is the section.

        A value set by the i-th ``-f`` override has line -i; ``locate`` turns it into a place.
        """
        node: YNode | None = self.airflow_node
        line = node.line if node else 1
        for part in [p for p in key_path.split(".") if p]:
            if isinstance(node, YMap):
                found = next(((kl, v) for k, kl, v in node.entries if k == part), None)
                if found is None:
                    return line
                line, node = found
            elif isinstance(node, YSeq) and part.isdigit() and int(part) < len(node.items):
                node = node.items[int(part)]
                line = getattr(node, "line", line)
            else:
                return line
        return line

    def airflow_error(self, key_path: str, message: str) -> ConfigError:
        """A ConfigError located at ``airflow.<key_path>`` in the config file."""
        key = f"{AIRFLOW_KEY}.{key_path}" if key_path else AIRFLOW_KEY
        return ConfigError(*self.locate(self.airflow_line(key_path)), key, message)


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read and check a config file; apply ``-f`` style overrides. Raises ConfigError."""
    config_path = Path(path).absolute()
    shown = _shown(config_path, path)
    try:
        text = config_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(shown, 1, "", f"cannot read the config: {reason}") from None
    root = parse_yaml(text, shown)
    if root is None:
        raise ConfigError(shown, 1, "", "the config is empty")
    if not isinstance(root, YMap):
        kind = "a list" if isinstance(root, YSeq) else "a single value"
        raise ConfigError(
            shown, root.line, "", f"the top level must be a mapping of keys to values, not {kind}"
        )
    apply_overrides(root, overrides)  # before the airflow section goes: `-f airflow.retries=3` works
    airflow_node: YMap | None = None
    index = root.index(AIRFLOW_KEY)
    if index >= 0:
        _, line, node = root.entries.pop(index)
        if not isinstance(node, YMap):
            where = (f"<-f {overrides[-line - 1]}>", 1) if line < 0 else (shown, line)
            raise ConfigError(*where, AIRFLOW_KEY, "the airflow section must be a mapping")
        node.line = line
        airflow_node = node
    add_builtins(root, config_path)  # after the overrides: `-f KEY=V` of a built-in is appended, so wins
    resolve_interpolations(root, shown)
    airflow = to_plain(airflow_node) if airflow_node is not None else None
    return Config(config_path, root, airflow, tuple(overrides), airflow_node)


def _shown(absolute: Path, given: str | Path) -> str:
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(given)
