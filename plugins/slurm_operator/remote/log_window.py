"""Reading a job log in windows: which bytes to read next, their decoding, and the complete lines."""

from __future__ import annotations

import codecs
import logging

from slurm_operator.model.records import LogChunk

log = logging.getLogger(__name__)


def decode_chunk(data: bytes, offset: int, at_eof: bool) -> LogChunk:
    """Decode bytes read at ``offset``; a UTF-8 character cut by the read size is left for the next
    read (``next_offset`` stops before it) unless the file ends there."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    text = decoder.decode(data, final=at_eof)
    pending = len(decoder.getstate()[0])
    return LogChunk(text=text, offset=offset, next_offset=offset + len(data) - pending)


def complete_lines(chunk: LogChunk, *, final: bool) -> tuple[str, int]:
    """The chunk's complete lines and the offset after them.

    Unless the job has ended (``final``), a half-written last line is kept for the next read, so a
    relayed line is never split in two.
    """
    text = chunk.text if final else chunk.text[: chunk.text.rfind("\n") + 1]
    if text == chunk.text:
        return text, chunk.next_offset  # the hook's own byte count (exact even around invalid UTF-8)
    return text, chunk.offset + len(text.encode())


def read_window(path: str, size: int, offset: int, max_bytes: int) -> tuple[int, int]:
    """(start, count) of the bytes to read from a file of ``size`` bytes at ``offset``.

    A file shorter than the offset was replaced (a new attempt reusing the path): read it from the start.
    """
    start = offset
    if start > size:
        log.warning("%s shrank below offset %d (now %d bytes): reading from the start", path, start, size)
        start = 0
    return start, max(0, min(max_bytes, size - start))
