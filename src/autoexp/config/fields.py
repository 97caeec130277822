"""Parsing ``str.format`` replacement fields: referenced names, and refusal of unsafe fields."""

from __future__ import annotations

import re
from collections.abc import Container
from functools import lru_cache
from string import Formatter

_PARSE = Formatter().parse  # the parser str.format itself uses
_IDENT = re.compile(r"[A-Za-z_]\w*")
_ARG_END = re.compile(r"[.\[]")
_DIGITS = re.compile(r"\d+")
MAX_FORMAT_WIDTH = 10_000  # `{X:>999999999}` would allocate a gigabyte


@lru_cache(maxsize=65536)
def field_names(text: str) -> tuple[str, ...]:
    """The full field names of ``text`` (``LR`` for ``{LR:.0e}``, ``A.b`` for ``{A.b}``), in order.

    Text that str.format cannot parse (a lone ``}``) has none: str.format raises on it, and
    AutoExperiment then leaves the value as it is.
    """
    if "{" not in text:
        return ()
    try:
        return tuple(name for _, name, _, _ in _PARSE(text) if name is not None)
    except ValueError:
        return ()


def field_arg(field: str) -> str | None:
    """The key a field looks up (``LR``, ``A`` for ``A[0].x``, ``my-key``); None for ``{}`` and ``{0}``.

    str.format looks up whatever precedes the first ``.`` or ``[``, so ``{my-key}`` finds a variable
    named ``my-key``; a digit-only field is positional and never finds one.
    """
    arg = _ARG_END.split(field, maxsplit=1)[0]
    return arg if arg and not arg.isdigit() else None


def head_name(field: str, defined: Container[str] = ()) -> str | None:
    """The variable a field refers to when it is a ``{NAME}``: an identifier or a defined key; else None.

    None means the field is not a ``{NAME}``: ``{}``, ``{0}``, a brace range ``{0000..0139}`` or awk's
    ``{print $1}``. str.format fails on those, and AutoExperiment leaves the text as it is.
    """
    arg = field_arg(field)
    if arg is None:
        return None
    return arg if _IDENT.fullmatch(arg) or arg in defined else None


@lru_cache(maxsize=65536)
def referenced_names(text: str) -> tuple[str, ...]:
    """Keys ``text``'s replacement fields look up (nested format specs included): its dependencies."""
    names: list[str] = []
    for field in field_names(text):
        head = field_arg(field)
        if head is not None:
            names.append(head)
    for spec in format_specs(text):
        names.extend(referenced_names(spec))
    return tuple(names)


@lru_cache(maxsize=65536)
def format_specs(text: str) -> tuple[str, ...]:
    """The format specs of ``text``'s fields (``.0e`` for ``{LR:.0e}``)."""
    if "{" not in text:
        return ()
    try:
        return tuple(spec for _, name, spec, _ in _PARSE(text) if name is not None and spec)
    except ValueError:
        return ()


@lru_cache(maxsize=65536)
def unsafe_field(text: str) -> str | None:
    """Why ``text`` must not be given to str.format (private attribute access, huge width), or None."""
    if "{" not in text:
        return None
    for field in field_names(text):
        for part in re.split(r"[.\[\]]", field)[1:]:
            if part.startswith("_"):
                return f"{{{field}}} accesses a private attribute; only plain {{NAME}} fields are allowed"
    for spec in format_specs(text):
        if "{" in spec:
            return f"format spec '{spec}' contains a nested field, which is not allowed"
        for digits in _DIGITS.findall(spec):
            if len(digits) > 6 or int(digits) > MAX_FORMAT_WIDTH:
                return f"format spec '{spec}' asks for a width over {MAX_FORMAT_WIDTH}"
    return None
