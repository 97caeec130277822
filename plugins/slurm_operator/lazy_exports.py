"""A package's public names, imported on first use (PEP 562).

Importing one module of a sub-package then loads nothing else of it: DAG files and the triggerer
import only what they use, and the import order inside the plugin has no cycles to care about.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and a module ``__getattr__`` for ``package`` whose ``exports`` map a public name
    to the relative module that defines it."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name], package), name)

    return sorted(exports), __getattr__
