"""Pure rules for Megatron checkpoint folders: tracker file, iteration folders, completeness."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

TRACKER_FILE = "latest_checkpointed_iteration.txt"
_ITER_DIR = re.compile(r"^iter_(\d{7,})$")
_MP_RANK = re.compile(r"^mp_rank_\d+(_\d+)?$")
LEGACY_FILE = "model_optim_rng.pt"
TORCH_DIST_METADATA = "metadata.json"


class TrackerParseError(ValueError):
    """The tracker file holds neither an integer nor ``release`` (quotes the raw text)."""


def parse_tracker(text: str) -> int | None:
    """Iteration named by Megatron's tracker file; None for ``release`` checkpoints."""
    value = text.strip()
    if value == "release":
        return None
    if not value.isdigit():
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


@dataclass(frozen=True)
class Layout:
    """What a checkpoint folder must contain to be complete, given its top-level entries."""

    kind: str  # "torch_dist", "legacy" or "unknown"
    files: tuple[str, ...]  # relative paths whose size/mtime must exist and settle
    rank_dirs: tuple[str, ...] = ()  # legacy: sub-folders to look into

    @property
    def recognised(self) -> bool:
        """False while the folder is still empty or half-created."""
        return self.kind != "unknown" and bool(self.files or self.rank_dirs)


def layout_of(entries: Iterable[str]) -> Layout:
    """Classify an iteration folder listing (torch_dist: metadata.json + .distcp; legacy: mp_rank_*)."""
    names = sorted(entries)
    distcp = tuple(n for n in names if n.endswith(".distcp"))
    if TORCH_DIST_METADATA in names and distcp:
        return Layout("torch_dist", (TORCH_DIST_METADATA, *distcp))
    ranks = tuple(n for n in names if _MP_RANK.match(n))
    if ranks:
        return Layout("legacy", tuple(f"{r}/{LEGACY_FILE}" for r in ranks), ranks)
    return Layout("unknown", ())


Snapshot = tuple[tuple[str, int, float], ...]


def snapshot(stats: Mapping[str, tuple[int, float] | None]) -> Snapshot | None:
    """Sorted (path, size, mtime) of every required file; None when any is missing."""
    rows: list[tuple[str, int, float]] = []
    for path, stat in sorted(stats.items()):
        if stat is None:
            return None
        rows.append((path, stat[0], stat[1]))
    return tuple(rows)


@dataclass
class SettleTracker:
    """Declares an iteration complete once its snapshot stayed equal for ``settle_seconds``."""

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
