"""The field types of the settings schema: exact YAML kinds (nothing coerced), each with its one-line error.

Shared by every section of the `airflow:` schema (``settings``) and the sections kept in their own
modules. No Airflow import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import ConfigDict, GetCoreSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

# Every section rejects unknown keys.
SCHEMA = ConfigDict(extra="forbid")


class Exact:
    """Field annotation: the YAML value must already have one of ``kinds``.

    Nothing is coerced (`retries: "2"` is an error, as before the schema) and the value keeps its type:
    an int number of seconds stays an int, which reaches the serialized DAGs.

    :param text: what the key takes, in errors (``expected TEXT, got ...``) and in the docs table.
    :param unit: appended to bound errors and to the docs type (``must be >= 0 (seconds)``).
    """

    def __init__(self, text: str, *kinds: type, unit: str = "", nonempty: bool = False) -> None:
        self.text, self.kinds, self.unit, self.nonempty = text, kinds, unit, nonempty

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def check(self, value: Any) -> Any:
        # bool is an int subclass: `retries: yes` must not pass as 1.
        wrong_kind = (isinstance(value, bool) and bool not in self.kinds) or not isinstance(value, self.kinds)
        if wrong_kind or (self.nonempty and not value):
            raise self.error(value)
        return value

    def error(self, value: Any) -> PydanticCustomError:
        return PydanticCustomError(
            "autoexp_type", "expected {text}, got {got}", {"text": self.text, "got": repr(value)}
        )


class StringList(Exact):
    """A list of strings, or one string standing for a list of one (``tags: scaling``); kept as a tuple."""

    def __init__(self) -> None:
        super().__init__("a list of strings", list, tuple, str)

    def check(self, value: Any) -> Any:
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise self.error(value)
        return tuple(value)


class Parsed(Exact):
    """An exact value that ``parse`` must also accept (a ValueError is the key's one-line error)."""

    def __init__(self, text: str, parse: Callable[[Any], Any], *kinds: type) -> None:
        super().__init__(text, *kinds)
        self.parse = parse

    def check(self, value: Any) -> Any:
        try:
            return self.parse(super().check(value))
        except ValueError:
            raise self.error(value) from None


class Checked(Exact):
    """A string that ``check`` must accept; its ValueError's text is the key's one-line error."""

    def __init__(self, text: str, check: Callable[[str], str]) -> None:
        super().__init__(text, str)
        self.validate = check

    def check(self, value: Any) -> Any:
        try:
            return self.validate(super().check(value))
        except ValueError as exc:
            raise PydanticCustomError("autoexp_type", "{why}", {"why": str(exc)}) from None


Count = Annotated[int, Exact("int", int)]
Seconds = Annotated[int | float, Exact("int or float", int, float, unit="seconds")]
Text = Annotated[str, Exact("str", str)]
Flag = Annotated[bool, Exact("bool", bool)]
VarName = Annotated[str, Exact("a variable name", str, nonempty=True)]
Strings = Annotated[tuple[str, ...], StringList()]


def rule_error(field: str, message: str) -> PydanticCustomError:
    """A rule across keys of one section, reported at the key that must change."""
    return PydanticCustomError("autoexp_rule", "{message}", {"field": field, "message": message})
