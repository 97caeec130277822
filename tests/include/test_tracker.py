"""One table for "the tracker reached N": the cluster-side shell twins held to the Python reading.

Three places read Megatron's ``latest_checkpointed_iteration.txt``: ``checkpoint_layout.read_tracker``
(the checkpoint waits, in the triggerer), ``autoexp_tracker`` in include/helpers/ckpt_lib.sh (the
helpers and the convert template, on the cluster) and ``run_layout.tracker_reached`` (a training's
completion command, over SSH). Each case runs through all three.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.model.exceptions import RemotePathNotFoundError

from autoexp.campaign.planning import checkpoint_layout, run_layout
from autoexp.campaign.planning.checkpoint_layout import TRACKER_FILE, TrackerParseError

CKPT_LIB = Path(__file__).resolve().parents[2] / "include" / "helpers" / "ckpt_lib.sh"
N = 40

# (case, the tracker file's text or None for no file, the iteration it names (None: none), what
# read_tracker makes of it: "absent" (no file, or empty: Megatron rewriting it), "present" or "error")
CASES: list[tuple[str, str | None, int | None, str]] = [
    ("missing file", None, None, "absent"),
    ("empty", "", None, "absent"),
    ("only whitespace", " \n\t\n", None, "absent"),
    ("release", "release", None, "present"),
    ("release, newline", "release\n", None, "present"),
    ("at N", "40", 40, "present"),
    ("at N, newline", "40\n", 40, "present"),
    ("at N, spaces around", "  40 \n", 40, "present"),
    ("at N, tab and CRLF", "\t40\r\n", 40, "present"),
    ("at N, blank line first", "\n40\n", 40, "present"),
    ("below N", "39\n", 39, "present"),
    ("above N", "41\n", 41, "present"),
    ("zero", "0\n", 0, "present"),
    ("leading zeros", "0040\n", 40, "present"),
    ("leading zeros, not octal", "0008\n", 8, "present"),
    ("space inside", "4 0\n", None, "error"),
    ("two lines", "40\n50\n", None, "error"),
    ("garbage", "abc\n", None, "error"),
    ("number and garbage", "40abc\n", None, "error"),
    ("negative", "-5\n", None, "error"),
    ("negative above N", "-41\n", None, "error"),
    ("plus sign", "+40\n", None, "error"),
    ("float", "40.0\n", None, "error"),
    ("non-ASCII digits", "\u0664\u0660\n", None, "error"),
]


class _Files:
    """``read_text`` of checkpoint_layout.CheckpointFiles (all read_tracker reads), from texts."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts

    async def read_text(self, path: str) -> str:
        if path not in self.texts:
            raise RemotePathNotFoundError(path)
        return self.texts[path]


def _folder(tmp_path: Path, text: str | None) -> Path:
    ckpt = tmp_path / "check points"  # a space: the shell quotes it
    ckpt.mkdir()
    if text is not None:
        (ckpt / TRACKER_FILE).write_bytes(text.encode("utf-8"))
    return ckpt


def _bash(script: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env=env).stdout


def _python_reading(ckpt: Path) -> tuple[str, int | None]:
    tracker = ckpt / TRACKER_FILE
    texts = {str(tracker): tracker.read_text(encoding="utf-8")} if tracker.exists() else {}
    files: Any = _Files(texts)
    try:
        present, iteration = asyncio.run(checkpoint_layout.read_tracker(files, str(ckpt)))
    except TrackerParseError:
        return "error", None
    return ("present" if present else "absent"), iteration


@pytest.mark.parametrize(("text", "iteration", "kind"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_tracker_reads_alike_in_python_and_in_both_shell_twins(
    tmp_path: Path, text: str | None, iteration: int | None, kind: str
) -> None:
    ckpt = _folder(tmp_path, text)
    assert _python_reading(ckpt) == (kind, iteration)
    # ckpt_lib.sh: the iteration, -1 for none
    shown = _bash(f'source "{CKPT_LIB}"; autoexp_tracker "{ckpt}"').strip()
    assert shown == str(-1 if iteration is None else iteration)
    # the completion command: reached (1) or not (0), below, at and above the named iteration
    for n in (N - 1, N, N + 1, 0):
        reached = iteration is not None and iteration >= n
        assert _bash(run_layout.tracker_reached(str(ckpt), n)).strip() == ("1" if reached else "0"), n
