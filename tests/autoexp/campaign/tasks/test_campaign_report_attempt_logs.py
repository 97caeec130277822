"""The report task reads a training attempt's iteration lines from its log's head and tail: a long log's
first iteration (after the arguments) and its highest (at the end), in 64 KiB chunks, not the whole file.

Uses the shared fake (tests/support/fake_slurm.py) behind a synchronous front: which byte ranges of a
multi-megabyte log are read is pure logic, and a real cluster adds nothing to it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from slurm_operator.model.records import LogChunk, RemoteStat

from autoexp.campaign.report.attempts import LogProgress
from autoexp.campaign.tasks.campaign_report_task import _iteration_lines
from tests.support.fake_slurm import FakeSlurm


class _Sync:
    """The sync hook's read verbs over the fake's async ones; counts the bytes asked for."""

    def __init__(self, fake: FakeSlurm) -> None:
        self.fake, self.read_bytes = fake, 0

    def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        chunk = asyncio.run(self.fake.read_log(path, offset, max_bytes))
        self.read_bytes += chunk.next_offset - chunk.offset
        return chunk

    def stat(self, path: str) -> RemoteStat:
        return asyncio.run(self.fake.stat(path))


def _line(stamp: str, iteration: int) -> str:
    return f" [2026-12-01 {stamp}] iteration {iteration:8d}/{5000:8d} | lm loss: 3.000000E+00 |\n"


def test_a_long_logs_first_and_highest_iteration_from_its_head_and_tail() -> None:
    fake = FakeSlurm()
    noise = "".join(f" > building dataset index {i:08d} ...\n" for i in range(60_000))  # ~2.3 MB
    fake.files["/runs/40.out"] = _line("10:02:00", 10) + noise + _line("12:00:00", 4000)
    hook: Any = _Sync(fake)
    assert _iteration_lines(hook, "/runs/40.out") == LogProgress(
        10, 4000, "2026-12-01 10:02:00", "2026-12-01 12:00:00"
    )
    assert hook.read_bytes == 128 * 1024  # its first 64 KiB chunk (iteration 10 in it) and its last


def test_a_first_iteration_after_a_long_start_up_is_found_in_a_later_chunk() -> None:
    fake = FakeSlurm()
    start_up = "".join(f" > arg {i:08d} ....................\n" for i in range(3_000))  # ~100 KiB
    fake.files["/runs/41.out"] = start_up + _line("11:03:00", 810) + _line("11:24:40", 1200)
    hook: Any = _Sync(fake)
    assert _iteration_lines(hook, "/runs/41.out") == LogProgress(
        810, 1200, "2026-12-01 11:03:00", "2026-12-01 11:24:40"
    )


def test_a_log_gone_gives_no_figures() -> None:
    hook: Any = _Sync(FakeSlurm())
    assert _iteration_lines(hook, "/runs/gone.out") is None
