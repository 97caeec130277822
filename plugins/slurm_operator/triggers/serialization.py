"""What every trigger's ``serialize()`` returns, derived from its class: its import path and arguments."""

from __future__ import annotations

import inspect
from typing import Any

from airflow.triggers.base import BaseTrigger

_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


def class_path(cls: type) -> str:
    """The import path the triggerer rebuilds ``cls`` from (``slurm_operator....`` under plugins/)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def arguments(trigger: BaseTrigger, cls: type) -> dict[str, Any]:
    """Every argument of ``cls``'s constructor, read back from the attribute of the same name.

    Derived from the signatures, so a new argument cannot be left out of ``serialize()`` (the
    triggerer rebuilds the trigger from exactly these). A constructor that passes ``**kwargs`` on to
    its base adds the base's arguments (base first); one that takes ``**_`` drops them.
    """
    own: list[list[str]] = []
    for klass in cls.__mro__:
        if klass is BaseTrigger or klass is object:
            break
        if "__init__" not in vars(klass):  # inherits its constructor: the next class's arguments
            continue
        params = inspect.signature(klass).parameters.values()
        own.append([p.name for p in params if p.kind in _NAMED])
        if not any(p.kind is p.VAR_KEYWORD and p.name != "_" for p in params):
            break
    names = dict.fromkeys(name for names in reversed(own) for name in names)
    return {name: getattr(trigger, name) for name in names}
