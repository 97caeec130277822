"""Format strings of the `airflow:` section (``remote_dir``): plain ``{VAR}`` fields only.

``str.format`` would also follow ``{RUN_DIR.__class__}``, index ``{A[0]}``, convert ``{A!r}`` and pad
``{A:>999}``: a path needs none of that, so such a field is refused where the key is written.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

_NAME_START = set(string.ascii_letters + "_")
_NAME_REST = _NAME_START | set(string.digits)


def field_names(text: str) -> list[str]:
    """The ``{NAME}`` fields of ``text`` in order; ValueError (one line) for any other kind of field."""
    names: list[str] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        why = f"{text!r} is not a valid format string ({exc}); write {{{{ and }}}} for braces"
        raise ValueError(why) from None
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        plain = bool(field) and field[0] in _NAME_START and set(field) <= _NAME_REST
        if not plain or spec or conversion:
            shown = field + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            shown = "{" + shown + "}"
            raise ValueError(f"only {{VAR}} fields are allowed, not {shown}")
        names.append(field)
    return names


def checked(text: str) -> str:
    """``text`` when its fields are all plain names (a settings validator)."""
    field_names(text)
    return text


def fill(text: str, params: Mapping[str, Any]) -> str:
    """``text`` with each ``{NAME}`` replaced by ``params[NAME]``; KeyError names the first unknown one."""
    for name in field_names(text):
        if name not in params:
            raise KeyError(name)
    return text.format_map(params)
