"""One JSON form for the plugin's records: a dataclass's fields as JSON primitives and back, typed by
its annotations, so a record's form follows its fields instead of a hand-written pair that drifts.

Events, the trigger's ``carry`` and the task state store hold these forms. A record whose JSON form is
not its fields (the ledger's ``Attempt``) keeps its own ``to_dict``/``from_dict``; a field typed by such
a class is read back through it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from typing import Any, TypeVar

from slurm_operator.model.states import SlurmState

T = TypeVar("T", bound="JsonForm")


def to_json(value: Any) -> Any:
    """``value`` as JSON primitives: a record as its form, a dataclass as a dict of its fields, an
    enum as its value."""
    if isinstance(value, Enum):
        return value.value
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def from_json(hint: Any, value: Any) -> Any:
    """``value`` (JSON) read as the annotation ``hint`` says: records, enums, numbers, containers."""
    if value is None:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return from_json(kinds[0], value) if len(kinds) == 1 else value
    if origin in (dict, Mapping) and len(args) == 2:
        return {str(k): from_json(args[1], v) for k, v in dict(value).items()}
    if origin in (list, tuple) and args:
        items = [from_json(args[0], v) for v in value]
        return tuple(items) if origin is tuple else items
    if hint is SlurmState:
        return json_state(value)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(value)
    if isinstance(hint, type) and hasattr(hint, "from_dict"):
        return hint.from_dict(value)
    if hint in (int, float, str, bool):
        return hint(value)
    return value


def json_state(value: Any) -> SlurmState:
    """A state of our JSON forms (an enum value, written by ``to_dict``), not Slurm's text: that was
    parsed once, where it came in (``SlurmState.parse``). Anything else is UNKNOWN."""
    return SlurmState.__members__.get(str(value), SlurmState.UNKNOWN)


class JsonForm:
    """A dataclass's ``to_dict``/``from_dict`` derived from its fields (unknown keys are rejected by
    the constructor, missing ones take their defaults)."""

    def to_dict(self) -> dict[str, Any]:
        return {f.name: to_json(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        hints = typing.get_type_hints(cls)
        return cls(**{k: from_json(hints.get(k, Any), v) for k, v in data.items()})
