"""Megatron's checkpoint layout: tracker, ``iter_%07d`` folders, completeness by each format's last writes.

A checkpoint is complete only by the files its format writes last, never by sizes or age:

- ``torch_dist`` (megatron-core ``dist_checkpointing.save``): ``common.pt``, then the
  ``__<rank>_<n>.distcp`` shards, then torch's ``.metadata`` (written to a temporary name and
  renamed), then, after a barrier, ``metadata.json`` naming the backend. A folder without a
  parseable ``metadata.json`` and a ``.metadata`` is still being written, or was abandoned.
- legacy ``torch``: one ``torch.save`` per rank into ``mp_rank_*/``. A ``torch.save`` file is a zip
  archive whose end-of-central-directory record is the last thing written, so a file that does not
  end with that record is cut short. Every ``*.pt`` of every rank folder must end with it; an
  iteration before the tracker's must also hold the same rank folders and files as the tracker's
  (a rank that never started writing leaves no file to check).
- both: the tracker ``latest_checkpointed_iteration.txt`` is written after the whole save; an
  iteration beyond it is never complete, however old.

Pure (no Airflow): the probes read through the small ``CheckpointFiles`` protocol. See docs/checkpoints.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from slurm_operator.model.exceptions import RemotePathNotFoundError

TRACKER_FILE = "latest_checkpointed_iteration.txt"
_ITERATION = re.compile(r"[0-9]+")
_ITER_DIR = re.compile(r"^iter_(\d{7,})$")
_MP_RANK = re.compile(r"^mp_rank_\d+(_\d+)*$")
LEGACY_FILE = "model_optim_rng.pt"
TORCH_DIST_METADATA = "metadata.json"
DCP_METADATA = ".metadata"
# End of central directory record: signature and fixed part (torch.save writes no zip comment).
ZIP_END = "PK\x05\x06"
ZIP_END_SIZE = 22


class TrackerParseError(ValueError):
    """The tracker file holds neither an integer nor ``release`` (quotes the raw text)."""


def parse_tracker(text: str) -> int | None:
    """Iteration named by Megatron's tracker file; None for ``release`` checkpoints.

    ASCII digits only (``str.isdigit`` also takes ``²`` and other scripts' digits, which neither
    Megatron writes nor the cluster-side shell twins accept; tests/include/test_tracker.py).
    """
    value = text.strip()
    if value == "release":
        return None
    if not _ITERATION.fullmatch(value):
        raise TrackerParseError(
            f"{TRACKER_FILE}: expected an iteration number or 'release', got {value!r:.80}"
        )
    return int(value)


def iteration_dir(iteration: int) -> str:
    """Folder name Megatron uses for an iteration (``iter_0000100``)."""
    return f"iter_{iteration:07d}"


def iteration_dirs(names: Iterable[str]) -> dict[int, str]:
    """Map iteration -> folder name for every ``iter_NNNNNNN`` entry of a checkpoint folder."""
    found: dict[int, str] = {}
    for name in names:
        m = _ITER_DIR.match(name)
        if m:
            found[int(m.group(1))] = name
    return found


def rank_dirs(entries: Iterable[str]) -> tuple[str, ...]:
    """The legacy format's per-rank folders (``mp_rank_00``, ``mp_rank_00_001``...), sorted."""
    return tuple(sorted(n for n in entries if _MP_RANK.match(n)))


def torch_dist_finished(entries: Iterable[str], metadata_json: str | None) -> bool:
    """torch_dist: both metadata files are there and ``metadata.json`` (written last) is whole."""
    names = set(entries)
    if DCP_METADATA not in names or TORCH_DIST_METADATA not in names or metadata_json is None:
        return False
    try:
        config = json.loads(metadata_json)
    except ValueError:
        return False  # cut short: megatron-core writes it with a plain open/json.dump
    return isinstance(config, dict) and "sharded_backend" in config


def zip_finished(tail: str) -> bool:
    """A ``torch.save`` file whose last ``ZIP_END_SIZE`` bytes (decoded) start its end record."""
    return tail.startswith(ZIP_END)


Snapshot = tuple[tuple[str, int, float], ...]


def snapshot(stats: Mapping[str, tuple[int, float] | None]) -> Snapshot | None:
    """Sorted (path, size, mtime) of every marker file; None when any is missing."""
    rows: list[tuple[str, int, float]] = []
    for path, stat in sorted(stats.items()):
        if stat is None:
            return None
        rows.append((path, stat[0], stat[1]))
    return tuple(rows)


@dataclass
class SettleTracker:
    """Declares an iteration complete once its marker snapshot stayed equal for ``settle_seconds``.

    Completeness itself comes from the format (``probe_iteration``); this is only a quiet period
    after it, e.g. against a re-save of the same iteration rewriting its markers.
    """

    settle_seconds: float
    _first_seen: dict[int, tuple[Snapshot, float]]

    @classmethod
    def new(cls, settle_seconds: float) -> SettleTracker:
        """An empty tracker."""
        return cls(settle_seconds, {})

    def observe(self, iteration: int, snap: Snapshot | None, now: float) -> bool:
        """Record one observation; True when this iteration is complete and settled."""
        if snap is None:
            self._first_seen.pop(iteration, None)
            return False
        seen = self._first_seen.get(iteration)
        if seen is None or seen[0] != snap:
            self._first_seen[iteration] = (snap, now)
            return self.settle_seconds <= 0
        return now - seen[1] >= self.settle_seconds

    def remaining(self, iteration: int, now: float) -> float | None:
        """Seconds until ``iteration``, seen complete, has been quiet long enough; None when unseen."""
        seen = self._first_seen.get(iteration)
        return None if seen is None else max(0.0, self.settle_seconds - (now - seen[1]))


# -- reading a folder (through any object with these coroutines: AsyncSlurmHook has them) ----------


class _Stat(Protocol):
    @property
    def exists(self) -> bool: ...
    @property
    def size(self) -> int: ...
    @property
    def mtime(self) -> float: ...


class _Chunk(Protocol):
    @property
    def text(self) -> str: ...


class CheckpointFiles(Protocol):
    """What the completeness check reads: listings, small texts, stats and a file's last bytes."""

    async def list_dir(self, path: str) -> list[str]: ...
    async def read_text(self, path: str) -> str: ...
    async def stat(self, path: str) -> _Stat: ...
    async def read_log(self, path: str, offset: int = 0, max_bytes: int = ...) -> _Chunk: ...


RankLayout = tuple[tuple[str, tuple[str, ...]], ...]  # (rank folder, its *.pt files), sorted


async def read_tracker(files: CheckpointFiles, base: str) -> tuple[bool, int | None]:
    """(present, iteration) of the tracker; an empty one is Megatron rewriting it in place: absent."""
    try:
        text = await files.read_text(f"{base}/{TRACKER_FILE}")
    except RemotePathNotFoundError:
        return False, None
    if not text.strip():
        return False, None
    return True, parse_tracker(text)


async def legacy_layout(files: CheckpointFiles, folder: str, entries: Iterable[str]) -> RankLayout:
    """Each rank folder of a legacy iteration with the ``*.pt`` files it holds now."""
    layout = []
    for rank in rank_dirs(entries):
        names = await files.list_dir(f"{folder}/{rank}")
        layout.append((rank, tuple(sorted(n for n in names if n.endswith(".pt")))))
    return tuple(layout)


async def probe_iteration(
    files: CheckpointFiles, folder: str, reference: RankLayout | None = None
) -> Snapshot | None:
    """The marker files of a complete iteration folder (for ``SettleTracker``), None when incomplete.

    ``reference``: the rank layout of the tracker's iteration, which a legacy one must match.
    """
    try:
        entries = await files.list_dir(folder)
        if TORCH_DIST_METADATA in entries or DCP_METADATA in entries:
            try:
                text: str | None = await files.read_text(f"{folder}/{TORCH_DIST_METADATA}")
            except RemotePathNotFoundError:
                text = None
            if not torch_dist_finished(entries, text):
                return None
            return await _stats(files, folder, (DCP_METADATA, TORCH_DIST_METADATA))
        layout = await legacy_layout(files, folder, entries)
        if not layout or any(LEGACY_FILE not in pts for _, pts in layout):
            return None
        if reference is not None and layout != reference:
            return None
        paths = tuple(f"{rank}/{pt}" for rank, pts in layout for pt in pts)
        snap = await _stats(files, folder, paths)
        if snap is None:
            return None
        for rel, size, _ in snap:
            if size < ZIP_END_SIZE:
                return None
            tail = await files.read_log(f"{folder}/{rel}", size - ZIP_END_SIZE, ZIP_END_SIZE)
            if not zip_finished(tail.text):
                return None
        return snap
    except RemotePathNotFoundError:
        return None  # removed while we looked (a re-save replacing it)


async def _stats(files: CheckpointFiles, folder: str, rels: Iterable[str]) -> Snapshot | None:
    stats: dict[str, tuple[int, float] | None] = {}
    for rel in rels:
        st = await files.stat(f"{folder}/{rel}")
        stats[rel] = (st.size, st.mtime) if st.exists else None
    return snapshot(stats)


async def complete_iterations(
    files: CheckpointFiles, base: str, iteration: int, settle: SettleTracker, now: float
) -> list[int] | None:
    """Every complete iteration up to the tracker once ``iteration`` is complete and settled, else None.

    Only the awaited iteration is probed while waiting (one folder per poll); the others are
    probed once it is there, for the list a mapped conversion may be expanded over.
    """
    present, latest = await read_tracker(files, base)
    if not present or (latest is not None and latest < iteration):
        return None
    dirs = {it: name for it, name in iteration_dirs(await files.list_dir(base)).items()
            if latest is None or it <= latest}  # fmt: skip
    if iteration not in dirs:
        return None
    reference = None
    if latest is not None and latest in dirs:
        folder = f"{base}/{dirs[latest]}"
        reference = await legacy_layout(files, folder, await files.list_dir(folder)) or None
    target = await probe_iteration(files, f"{base}/{dirs[iteration]}", reference)
    if not settle.observe(iteration, target, now):
        return None
    complete = [iteration]
    for it, name in dirs.items():
        if it != iteration and await probe_iteration(files, f"{base}/{name}", reference) is not None:
            complete.append(it)
    return sorted(complete)
