"""Reading a job log in windows: what to read next, decoding across cut characters, complete lines."""

from __future__ import annotations

from slurm_operator.model.records import LogChunk
from slurm_operator.remote import log_window


def test_decode_chunk_keeps_cut_characters_for_next_read() -> None:
    data = "aé".encode()  # b"a\xc3\xa9"
    first = log_window.decode_chunk(data[:2], 100, at_eof=False)
    assert (first.text, first.offset, first.next_offset) == ("a", 100, 101)
    second = log_window.decode_chunk(data[1:], first.next_offset, at_eof=True)
    assert (second.text, second.next_offset) == ("é", 103)
    assert log_window.decode_chunk(b"\xff", 0, at_eof=True).text == "\ufffd"


def test_read_window() -> None:
    assert log_window.read_window("/l", size=10, offset=4, max_bytes=100) == (4, 6)
    assert log_window.read_window("/l", size=10, offset=4, max_bytes=2) == (4, 2)
    assert log_window.read_window("/l", size=10, offset=10, max_bytes=2) == (10, 0)
    assert log_window.read_window("/l", size=3, offset=10, max_bytes=100) == (0, 3)  # replaced file


def test_only_complete_lines_go_out_until_the_job_has_ended() -> None:
    chunk = LogChunk(text="a\nb\nhal", offset=10, next_offset=18)
    assert log_window.complete_lines(chunk, final=False) == ("a\nb\n", 14)
    assert log_window.complete_lines(chunk, final=True) == ("a\nb\nhal", 18)
