"""Before a training resumes: check the checkpoint the tracker names; set a corrupt one aside, roll back.

Run by the training template before the trainer starts (``python -m autoexp_cluster.ckpt_check
CHECKPOINT_DIR --max-rollbacks N``). Nothing is unpickled and nothing is deleted:

- the format's completion markers, the rules of ``src/autoexp/campaign/planning/checkpoint_layout.py``
  (the Airflow side's reading): torch_dist needs ``.metadata`` and a ``metadata.json`` naming
  ``sharded_backend``; legacy needs ``model_optim_rng.pt`` in every ``mp_rank_*`` folder;
- beyond them, every file is of plausible size: each ``torch.save`` file (legacy ``*.pt``, torch_dist
  ``common.pt``) is a zip whose central directory reads (``zipfile``, which reads no pickle) and whose
  members all lie inside the file; every ``.distcp`` shard that ``.metadata`` names is there and not
  empty (the names are read by walking the pickle's opcodes with ``pickletools``, which runs nothing).

A bad checkpoint is renamed ``iter_NNNNNNN.corrupt-<UTC time>``, the tracker is pointed at the newest good
iteration below it (or removed when there is none: the training starts over), and the rollback is
appended to ``.autoexp_rollbacks`` next to the checkpoints. After ``max_rollbacks`` of them the check
refuses (exit 3) instead of rolling back again. Each action is one ``[autoexp] ...`` line on stdout.
Standard library only: it runs in seconds, before torch is imported. See docs/checkpoints.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pickletools
import re
import sys
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

TRACKER = "latest_checkpointed_iteration.txt"
ROLLBACKS = ".autoexp_rollbacks"
DEFAULT_MAX_ROLLBACKS = 2
EXIT_TOO_MANY_ROLLBACKS = 3
_ITER_DIR = re.compile(r"^iter_(\d{7,})$")
_MP_RANK = re.compile(r"^mp_rank_\d+(_\d+)*$")


def _zip_problem(path: Path) -> str | None:
    """Why ``path`` is not a whole ``torch.save`` zip archive, or None when it is."""
    try:
        size = path.stat().st_size
        if size == 0:
            return "empty"
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"not a whole torch.save file ({type(exc).__name__}: {first})"
    if not infos:
        return "a zip archive with no members"
    for info in infos:
        # torch.save stores members uncompressed; a member running past the end is a cut-short file
        # whose central directory was copied back, or a file overwritten in place.
        if info.header_offset + info.compress_size > size:
            return f"member {info.filename} runs past the end of the file"
    if not any(info.filename.endswith("data.pkl") for info in infos):
        return "a zip archive without the data.pkl of a torch.save file"
    return None


def _distcp_names(metadata: Path) -> set[str]:
    """The ``.distcp`` file names torch's ``.metadata`` pickle refers to (opcodes only, nothing runs)."""
    names: set[str] = set()
    with metadata.open("rb") as fh:
        for _op, arg, _pos in pickletools.genops(fh):
            if isinstance(arg, str) and arg.endswith(".distcp"):
                names.add(arg)
    return names


def _torch_dist_problem(folder: Path) -> str | None:
    meta, meta_json = folder / ".metadata", folder / "metadata.json"
    if not meta.is_file() or not meta_json.is_file():
        return "no .metadata/metadata.json: the save never finished"
    try:
        config = json.loads(meta_json.read_text())
    except (ValueError, OSError):
        return "metadata.json is cut short"
    if not isinstance(config, dict) or "sharded_backend" not in config:
        return "metadata.json names no sharded_backend"
    if meta.stat().st_size == 0:
        return ".metadata is empty"
    try:
        shards = _distcp_names(meta)
    except (ValueError, EOFError, OSError) as exc:
        return f".metadata is not a whole pickle ({type(exc).__name__})"
    on_disk = {p.name for p in folder.glob("*.distcp")}
    if not shards and not on_disk:
        return "no .distcp shard"
    for name in sorted(shards | on_disk):
        path = folder / name
        if not path.is_file():
            return f"shard {name} named by .metadata is missing"
        if path.stat().st_size == 0:
            return f"shard {name} is empty"
    common = folder / "common.pt"
    if common.exists():
        problem = _zip_problem(common)
        if problem:
            return f"common.pt: {problem}"
    return None


def _legacy_problem(folder: Path) -> str | None:
    ranks = sorted(p for p in folder.iterdir() if p.is_dir() and _MP_RANK.match(p.name))
    if not ranks:
        return "neither a torch_dist nor a legacy checkpoint (no metadata.json, no mp_rank_*)"
    for rank in ranks:
        if not (rank / "model_optim_rng.pt").is_file():
            return f"{rank.name}/model_optim_rng.pt is missing"
        for pt in sorted(rank.glob("*.pt")):
            problem = _zip_problem(pt)
            if problem:
                return f"{rank.name}/{pt.name}: {problem}"
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """Why the iteration folder ``folder`` cannot be resumed from, or None when it looks whole."""
    if not folder.is_dir():
        return "the folder is missing"
    try:
        if (folder / "metadata.json").exists() or (folder / ".metadata").exists():
            return _torch_dist_problem(folder)
        return _legacy_problem(folder)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"


@dataclass(frozen=True)
class Outcome:
    """What ``heal`` did: ``action`` is ok, none, rolled_back, started_over or refused."""

    action: str
    message: str
    iteration: int | None = None


def _iterations(checkpoints: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for path in checkpoints.iterdir():
        m = _ITER_DIR.match(path.name)
        if m and path.is_dir():  # a symlinked branch point (a cooldown's) is a valid place to resume
            found[int(m.group(1))] = path
    return found


def rollbacks_done(checkpoints: Path) -> int:
    """Rollbacks recorded for this training (one line each in ``.autoexp_rollbacks``)."""
    path = checkpoints / ROLLBACKS
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def _write_tracker(checkpoints: Path, iteration: int) -> None:
    tmp = checkpoints / f".{TRACKER}.autoexp-tmp"
    tmp.write_text(f"{iteration}\n")
    os.replace(tmp, checkpoints / TRACKER)


def heal(
    checkpoints: Path, max_rollbacks: int = DEFAULT_MAX_ROLLBACKS, now: datetime | None = None
) -> Outcome:
    """Check the tracker's checkpoint; set it aside and roll back when it is bad (see the module doc)."""
    tracker = checkpoints / TRACKER
    if not tracker.is_file():
        return Outcome("none", f"[autoexp] no checkpoint in {checkpoints}: training starts from scratch")
    text = tracker.read_text().strip()
    if not text.isdigit():
        # "release" (a converted release checkpoint) or an empty tracker: not ours to judge.
        return Outcome("ok", f"[autoexp] tracker {tracker} reads {text!r:.40}: not checked")
    iteration = int(text)
    name = f"iter_{iteration:07d}"
    problem = checkpoint_problem(checkpoints / name)
    if problem is None:
        return Outcome("ok", f"[autoexp] checkpoint {name} checked: complete, resuming from it", iteration)
    done = rollbacks_done(checkpoints)
    if done >= max_rollbacks:
        return Outcome(
            "refused",
            f"[autoexp] checkpoint {name} is corrupt ({problem}); {done} rollback(s) already made "
            f"(max {max_rollbacks}, {checkpoints / ROLLBACKS}): not rolling back again",
            iteration,
        )
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    aside = checkpoints / f"{name}.corrupt-{stamp}"
    if (checkpoints / name).exists() or (checkpoints / name).is_symlink():
        (checkpoints / name).rename(aside)
    older = sorted((it for it in _iterations(checkpoints) if it < iteration), reverse=True)
    target: int | None = None
    skipped: list[str] = []
    for it in older:
        why = checkpoint_problem(checkpoints / f"iter_{it:07d}")
        if why is None:
            target = it
            break
        skipped.append(f"iter_{it:07d} ({why})")
    if target is not None:
        _write_tracker(checkpoints, target)
        where = f"resuming from iter_{target:07d}"
        action = "rolled_back"
    else:
        tracker.unlink()
        where = "NO good checkpoint left: tracker removed, TRAINING STARTS OVER from iteration 0"
        action = "started_over"
    also = f"; also bad, left in place: {', '.join(skipped)}" if skipped else ""
    with (checkpoints / ROLLBACKS).open("a") as fh:
        fh.write(f"{stamp} {name} -> {aside.name} ({problem}); {where}\n")
    return Outcome(
        action,
        f"[autoexp] checkpoint {name} is corrupt ({problem}): set aside as {aside.name}, {where}{also} "
        f"(rollback {done + 1} of at most {max_rollbacks})",
        target,
    )


def main(argv: list[str] | None = None) -> int:
    """CLI: print one line; exit 0, or 3 when the rollback limit is reached."""
    parser = argparse.ArgumentParser(prog="python -m autoexp_cluster.ckpt_check", description=__doc__)
    parser.add_argument("checkpoints", type=Path, help="the training's --save/--load folder")
    parser.add_argument("--max-rollbacks", type=int, default=DEFAULT_MAX_ROLLBACKS)
    args = parser.parse_args(argv)
    if not args.checkpoints.is_dir():
        print(f"[autoexp] no checkpoint folder {args.checkpoints}: training starts from scratch", flush=True)
        return 0
    outcome = heal(args.checkpoints, args.max_rollbacks)
    print(outcome.message, flush=True)
    return EXIT_TOO_MANY_ROLLBACKS if outcome.action == "refused" else 0


if __name__ == "__main__":
    sys.exit(main())
