"""The docs table of the `airflow:` keys, generated from the settings schema (docs/config.md embeds it).

A key added to the schema without a description, or a table not pasted again, fails
tests/autoexp/campaign/planning/test_settings.py.
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from autoexp.campaign.planning.settings import _PATTERNS, AirflowSettings, _exact, _fields, _is_section

__all__ = ["settings_table"]


def _doc_default(info: FieldInfo) -> str:
    value = info.default
    if value is PydanticUndefined:
        return ""  # a section: its keys follow
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, tuple):
        return f"`[{', '.join(value)}]`"
    return f"`{value}`" if value != "" else '`""`'


def _doc_type_and_allowed(info: FieldInfo) -> tuple[str, str]:
    if _is_section(info.annotation):
        return "mapping", ""
    exact = _exact(info)
    allowed = [f"`{v}`" for v in get_args(info.annotation)] if exact is None else []
    for meta in info.metadata:
        allowed += [
            f"{op} {getattr(meta, key)}" for key, op in (("ge", ">="), ("gt", ">")) if hasattr(meta, key)
        ]
        if getattr(meta, "min_length", None) == 1 or getattr(meta, "nonempty", False):
            allowed.append("not empty")
        if getattr(meta, "pattern", None) in _PATTERNS:
            allowed.append(_PATTERNS[meta.pattern])
    kind = "str" if exact is None else f"{exact.unit} ({exact.text})" if exact.unit else exact.text
    return kind, ", ".join(allowed)


def settings_table() -> str:
    """The Markdown table of every `airflow:` key, generated from the schema (docs/config.md embeds it)."""
    rows = ["| key | type | default | allowed | meaning |", "| --- | --- | --- | --- | --- |"]

    def add(section: Any, prefix: str) -> None:
        for name, info in _fields(section).items():
            kind, allowed = _doc_type_and_allowed(info)
            rows.append(
                f"| `{prefix}{name}` | {kind} | {_doc_default(info)} | {allowed} | {info.description} |"
            )
            if _is_section(info.annotation):
                add(info.annotation, f"{prefix}{name}.")

    add(AirflowSettings, "")
    return "\n".join(rows) + "\n"
