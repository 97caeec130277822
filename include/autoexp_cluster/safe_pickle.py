"""Read checkpoint pickles without running code from them, and without Megatron-LM installed.

Megatron-LM pickles its ``args`` with classes from ``megatron.training`` / ``megatron.core`` (enums
such as ``AttnBackend``, dataclasses such as ``OptimizerConfig``). The conversion environment may
lack those modules, or hold an older megatron-core whose enum lacks a member the checkpoint names.
So nothing here imports them: every global from those packages becomes an inert ``Placeholder``
(it records what the pickle passed and runs nothing), everything else must be on PyTorch's own
``weights_only`` allow-list or the few extras below (what megatron-core registers itself), and
loading goes through ``torch.load(weights_only=True)``. Anything else is refused with one line.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import enum
import io
import pathlib
import pickle
import signal
import types
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

# Packages whose classes a Megatron checkpoint may name; they only ever become placeholders.
INERT_PACKAGES = ("megatron", "transformer_engine", "apex", "modelopt", "nvidia_resiliency_ext")


class UnsafeCheckpointError(Exception):
    """A checkpoint file that cannot be read safely; ``str()`` is one line naming the file."""


class Placeholder:
    """Stands for a class or enum member of a package this process does not import.

    ``args``/``state`` keep what the pickle carried (an enum's value, a dataclass's fields), so a
    message can show it; nothing of the original class ever runs.
    """

    qualified_name = "?"
    args: tuple[Any, ...]
    state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Placeholder:
        inst = super().__new__(cls)
        inst.args = args
        inst.state = None
        return inst

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        shown = ", ".join(repr(a) for a in self.args)
        return f"{self.qualified_name}({shown})"


@cache
def placeholder_for(qualified_name: str) -> type[Placeholder]:
    """One placeholder class per global name (cached: equal names give the same class)."""
    return type(
        qualified_name.rpartition(".")[2] or "Placeholder", (Placeholder,), {"qualified_name": qualified_name}
    )


def _numpy_globals() -> list[Any]:
    # RNG state (np.random.get_state()) pickles an ndarray; numpy 1 and 2 name the rebuilder differently.
    found: list[Any] = [np.ndarray, np.dtype]
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):
        mod = _import(module)
        for name in ("_reconstruct", "scalar"):
            fn = getattr(mod, name, None)
            if fn is not None:
                found.append((fn, f"{module}.{name}"))
    found += [getattr(np.dtypes, n) for n in dir(np.dtypes) if n.endswith("DType")]
    return found


def _import(module: str) -> Any:
    import importlib
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numpy.core is a deprecated alias in numpy 2
        try:
            return importlib.import_module(module)
        except ImportError:
            return None


@cache
def extra_safe_globals() -> list[Any]:
    """What a Megatron checkpoint holds besides tensors: the args Namespace, RNG state, TE's BytesIO."""
    return [
        argparse.Namespace,
        types.SimpleNamespace,
        pathlib.PosixPath,
        io.BytesIO,
        signal.Signals,
        *_numpy_globals(),
    ]


def _is_inert(qualified_name: str) -> bool:
    return qualified_name.split(".", 1)[0] in INERT_PACKAGES


def _global_name(entry: Any) -> str:
    return entry[1] if isinstance(entry, tuple) else f"{entry.__module__}.{entry.__qualname__}"


@contextmanager
def allowed_for(path: Path) -> Iterator[None]:
    """Allow-list for ``torch.load(path, weights_only=True)``: the extras plus placeholders for ``path``.

    Importing megatron-core registers its real enums as safe globals; while reading, those are
    swapped for placeholders (public ``torch.serialization`` API), so an enum member the installed
    version lacks reads like any other, and a checkpoint reads the same with or without megatron.
    The registry is process-wide: the tools read checkpoints from one thread only.
    """
    saved = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        torch.serialization.add_safe_globals([g for g in saved if not _is_inert(_global_name(g))])
        try:
            named = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
        except (ValueError, RuntimeError, pickle.UnpicklingError) as exc:
            raise UnsafeCheckpointError(
                f"{path}: unreadable, not a torch.save file ({_first_line(exc)})"
            ) from exc
        inert = [(placeholder_for(name), name) for name in named if _is_inert(name)]
        torch.serialization.add_safe_globals([*extra_safe_globals(), *inert])
        yield
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(saved)


def torch_load(path: Path) -> Any:
    """``torch.load(path, weights_only=True)`` with Megatron's globals as placeholders; one-line refusal."""
    with allowed_for(path):
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise UnsafeCheckpointError(f"{path}: refused to load: {_refusal(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _refusal(exc: BaseException) -> str:
    # torch's message is a paragraph ending in advice to allow-list the global: keep the fact only.
    text = " ".join(str(exc).split())
    for marker in ("Unsupported global: ", "Trying to load unsupported ", "Trying to call reduce "):
        at = text.find(marker)
        if at >= 0:
            fact = text[at:].split(" was not an allowed global")[0].split(". ")[0]
            return f"{fact} (only tensors, plain data and Megatron's args are read; nothing that runs code)"
    return _first_line(exc)


class _MetadataUnpickler(pickle.Unpickler):
    """torch_dist's ``.metadata`` is a plain pickle of ``torch.distributed.checkpoint`` dataclasses."""

    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        full = f"{module}.{name}"
        if _is_inert(full):
            return placeholder_for(full)
        if module in _DCP_MODULES and not name.startswith("__"):
            obj = getattr(_import(module), name, None)
            # Only plain records (dataclasses, enums): constructing them does nothing else.
            if isinstance(obj, type) and (dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                return obj
            if module == "torch.serialization" and name == "_get_layout":  # str -> torch.layout lookup
                return obj
        if module == "torch" and (name == "Size" or isinstance(getattr(torch, name, None), torch.dtype)):
            return getattr(torch, name)
        if full in _PLAIN:
            return _PLAIN[full]
        raise UnsafeCheckpointError(
            f"{self.path}: refused to load: global {full} is not a checkpoint-metadata class"
        )


_PLAIN = {
    "collections.OrderedDict": collections.OrderedDict,
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "pathlib.PosixPath": pathlib.PosixPath,  # StorageMeta.checkpoint_id
    "pathlib.PurePosixPath": pathlib.PurePosixPath,
}
_DCP_MODULES = (
    "torch.distributed.checkpoint.metadata",
    "torch.distributed.checkpoint.planner",
    "torch.distributed.checkpoint.filesystem",
    "torch.serialization",
)


def load_dcp_metadata(path: Path) -> Any:
    """Unpickle a torch_dist ``.metadata`` file with only checkpoint-metadata classes allowed."""
    try:
        with path.open("rb") as fh:
            return _MetadataUnpickler(fh, path).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise UnsafeCheckpointError(f"{path}: unreadable {type(exc).__name__}: {_first_line(exc)}") from exc
