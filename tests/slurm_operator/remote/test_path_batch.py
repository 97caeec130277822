"""The batched path command, run by a real local ``sh`` over real files, its parser and ``BatchedFiles``.

No SSH here (the command is what the login node runs, the transport adds nothing to it); the
counted, over-SSH version is tests/autoexp/campaign/triggerer/test_batched_waits_real.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmCommandError
from slurm_operator.remote import path_batch as pb
from slurm_operator.remote.path_batch import BatchedFiles, NotFetched, Read

ODD = "we$(touch PWNED) 'q' \"q\" `x`;|& *"  # a name any unquoted expansion would trip over
BROKEN = "line\nbreak"  # listed and statted; never requested (refused: one request is 4 stdin lines)


def run(requests: list[Read]) -> dict[Read, pb.Answer]:
    out = subprocess.run(
        ["sh", "-c", f"exec {pb.batch_command()}"],
        input=pb.batch_input(requests),
        capture_output=True,
        text=True,
        check=True,
    )
    return pb.parse_batch(out.stdout, requests)


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "run 1"
    (root / "iter_0000010" / "sub").mkdir(parents=True)
    (root / "iter_0000010" / "sub" / "deep.txt").write_text("deep")
    (root / "log.txt").write_bytes("héllo\nworld".encode())
    (root / ODD).write_text("odd")
    (root / BROKEN).write_text("nl")
    (root / "dangling").symlink_to(root / "nowhere")
    return root


async def test_a_tree_lists_and_stats_every_name_down_to_its_depth(tree: Path) -> None:
    answers = run([pb.tree(str(tree), 2)])
    files = BatchedFiles(answers)
    assert await files.list_dir(str(tree)) == sorted(["dangling", "iter_0000010", "log.txt", ODD, BROKEN])
    assert await files.list_dir(f"{tree}/iter_0000010/") == ["sub"]
    st = await files.stat(str(tree / "log.txt"))
    assert (st.exists, st.is_dir, st.size) == (True, False, len("héllo\nworld".encode()))
    assert abs(st.mtime - (tree / "log.txt").stat().st_mtime) < 1e-3
    assert (await files.stat(str(tree / ODD))).size == 3
    assert (await files.stat(str(tree / BROKEN))).size == 2
    assert not (await files.stat(str(tree / "dangling"))).exists
    assert not (await files.stat(str(tree / "absent"))).exists  # its folder was listed: known absent
    with pytest.raises(RemotePathNotFoundError):
        await files.list_dir(str(tree / "log.txt"))
    assert not (tree.parent / "PWNED").exists()


async def test_what_lies_below_a_tree_s_depth_is_fetched_next_round(tree: Path) -> None:
    files = BatchedFiles(run([pb.tree(str(tree), 1)]))
    with pytest.raises(NotFetched):
        await files.list_dir(str(tree / "iter_0000010"))
    with pytest.raises(NotFetched):
        await files.stat(str(tree / "iter_0000010" / "sub"))
    deeper = [pb.tree(str(tree / "iter_0000010"), 1), pb.tree(str(tree / "iter_0000010/sub"), 0)]
    assert list(files.asked) == deeper
    again = BatchedFiles(run(list(files.asked)))
    assert await again.list_dir(str(tree / "iter_0000010")) == ["sub"]
    assert (await again.stat(str(tree / "iter_0000010" / "sub"))).is_dir


async def test_reads_give_windows_texts_and_a_shrunk_file_from_its_start(tree: Path) -> None:
    log = str(tree / "log.txt")
    size = len("héllo\nworld".encode())
    odd = str(tree / ODD)
    requests = [
        pb.read(log, 0, 2),
        pb.read(log, 2, 100),
        pb.read(log, size + 50, 4),
        pb.read(log),
        pb.read(odd),
        pb.read(log, size, 100),  # nothing new since the last read
    ]
    files = BatchedFiles(run(requests))
    first = await files.read_log(log, 0, 2)  # "h" and half of "é": the cut character waits
    assert (first.text, first.offset, first.next_offset) == ("h", 0, 1)
    rest = await files.read_log(log, 2, 100)
    assert (rest.text, rest.next_offset) == ("\ufffdllo\nworld", size)
    restarted = await files.read_log(log, size + 50, 4)
    assert (restarted.text, restarted.offset) == ("hél", 0)
    assert await files.read_text(log) == "héllo\nworld"
    assert await files.read_text(odd) == "odd"
    at_end = await files.read_log(log, size, 100)
    assert (at_end.text, at_end.offset, at_end.next_offset) == ("", size, size)
    assert not (tree.parent / "PWNED").exists()
    with pytest.raises(NotFetched):
        await files.read_log(log, 3, 100)  # another window: next round


async def test_missing_paths_answer_not_found_and_a_relative_dash_path_is_no_option(tree: Path) -> None:
    (tree.parent / "-x").mkdir()
    (tree.parent / "-x" / "f").write_text("1")
    answers = run([pb.tree(str(tree / "nope"), 1), pb.read(str(tree / "nope.txt")), pb.tree("-x", 1)])
    files = BatchedFiles(answers)
    with pytest.raises(RemotePathNotFoundError):
        await files.list_dir(str(tree / "nope"))
    assert not (await files.stat(str(tree / "nope"))).exists
    with pytest.raises(RemotePathNotFoundError):
        await files.read_text(str(tree / "nope.txt"))
    assert await files.list_dir("-x") == ["f"]


def test_output_cut_short_or_garbled_is_one_clear_error() -> None:
    requests = [pb.tree("/a"), pb.read("/b")]
    with pytest.raises(SlurmCommandError, match=r"answer 1 of 2 \(/b\) missing or garbled"):
        pb.parse_batch("#path-batch 0 missing\n\n", requests)
    with pytest.raises(SlurmCommandError, match="answer for /a unreadable"):
        pb.parse_batch("#path-batch 0 ok\n!!notbase64\n#path-batch 1 missing\n\n", requests)


def test_paths_with_line_breaks_are_refused() -> None:
    with pytest.raises(ValueError, match="line break"):
        pb.read("/a\nb")
    with pytest.raises(ValueError, match="not a usable remote path"):
        pb.tree("")
