"""Batched remote reads: ONE shell command answers the listings, stats and reads of many waits.

A wait names what it needs as ``Read`` requests: ``tree(path, depth)`` (the path and everything below
it down to ``depth`` levels: names, kinds, sizes, mtimes) and ``read(path, offset, max_bytes)``.
``batch_command``/``batch_input`` build the one command for all of them, ``parse_batch`` turns its
output into answers, and ``BatchedFiles`` serves a condition's ``list_dir``/``stat``/``read_text``/
``read_log`` from those answers. A call the answers do not cover raises ``NotFetched`` and is
recorded, so that the next round fetches it. Pure: no SSH, no Airflow.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmCommandError
from slurm_operator.model.records import LogChunk, RemoteStat
from slurm_operator.remote import commands, log_window

MARK = "#path-batch"
# read_text is a read from 0 capped here: it is meant for markers and small metadata files.
TEXT_BYTES = 1 << 20

# Requests come on stdin, four lines each (kind, two numbers, path), read with `IFS= read -r` into
# variables that are only ever expanded inside double quotes: a path never reaches a shell parser,
# whatever it holds, and the command line stays the same few hundred bytes for any number of paths.
# Each request prints a header line and one line of base64 (find's NUL-separated records, or the
# bytes read), so any byte of a name or of a file survives the trip.
_SCRIPT = f"""i=0
while IFS= read -r kind && IFS= read -r a && IFS= read -r b && IFS= read -r p; do
  case $kind in
  tree)
    if [ -e "$p" ] || [ -L "$p" ]; then
      echo "{MARK} $i ok"
      find -L "$p" -maxdepth "$a" -printf '%y %s %T@ %P\\0' 2>/dev/null | base64 -w0; echo
    else echo "{MARK} $i missing"; echo; fi;;
  read)
    if [ -f "$p" ] && size=$(stat -L -c %s -- "$p" 2>/dev/null); then
      start=$a; [ "$start" -gt "$size" ] && start=0
      echo "{MARK} $i ok $size $start"
      # Nothing new (a log not grown since the last read): no process beyond the stat.
      [ "$start" -lt "$size" ] && tail -c +$((start + 1)) -- "$p" 2>/dev/null | head -c "$b" | base64 -w0
      echo
    else echo "{MARK} $i missing"; echo; fi;;
  esac
  i=$((i + 1))
done
exit 0"""


@dataclass(frozen=True)
class Read:
    """One request: ``tree`` (``a`` = depth) or ``read`` (``a`` = offset, ``b`` = max bytes)."""

    kind: str
    path: str
    a: int = 0
    b: int = 0


def tree(path: str, depth: int = 1) -> Read:
    """``path`` and what lies below it, ``depth`` levels deep (0: the path's own stat)."""
    return Read("tree", _clean(path), depth)


def read(path: str, offset: int = 0, max_bytes: int = TEXT_BYTES) -> Read:
    """Up to ``max_bytes`` of the file ``path`` from ``offset`` (from 0 when the file is shorter)."""
    return Read("read", _clean(path), offset, max_bytes)


def _clean(path: str) -> str:
    path = commands._path(path)
    if "\n" in path or "\r" in path:
        raise ValueError(f"not a watchable remote path (line break): {path!r}")
    return path.rstrip("/") or "/"


@dataclass(frozen=True)
class Entry:
    """One path below a tree request: ``kind`` as find's ``%y`` (d, f, l...), size, mtime."""

    kind: str
    size: int
    mtime: float


@dataclass(frozen=True)
class Answer:
    """What the command found for one request: ``entries`` (tree, "" = the root) or ``data`` (read)."""

    request: Read
    found: bool
    entries: Mapping[str, Entry] = field(default_factory=dict)
    size: int = 0
    start: int = 0
    data: bytes = b""


def batch_command() -> str:
    """The command line (the same for every batch; the requests go on stdin)."""
    return commands.sh(_SCRIPT)


def batch_input(requests: Iterable[Read]) -> str:
    """stdin of ``batch_command``: four lines per request (a path starting with "-" gets "./")."""
    out = []
    for r in requests:
        path = f"./{r.path}" if r.path.startswith("-") else r.path
        out.append(f"{r.kind}\n{int(r.a)}\n{int(r.b)}\n{path}\n")
    return "".join(out)


def parse_batch(stdout: str, requests: list[Read]) -> dict[Read, Answer]:
    """The answer to each request; output that is cut short or out of order is a SlurmCommandError."""
    lines = stdout.split("\n")
    answers: dict[Read, Answer] = {}
    for i, request in enumerate(requests):
        header = lines[2 * i].split() if 2 * i < len(lines) else []
        if len(header) < 3 or header[0] != MARK or header[1] != str(i) or 2 * i + 1 >= len(lines):
            raise SlurmCommandError(
                f"batched path query: answer {i} of {len(requests)} ({request.path}) missing or garbled; "
                f"got {' '.join(header)[:200]!r}"
            )
        if header[2] != "ok":
            answers[request] = Answer(request, found=False)
            continue
        try:
            payload = base64.b64decode(lines[2 * i + 1], validate=True)
            if request.kind == "tree":
                answers[request] = Answer(request, True, entries=_entries(payload))
            else:
                answers[request] = Answer(
                    request, True, size=int(header[3]), start=int(header[4]), data=payload
                )
        except (binascii.Error, ValueError, IndexError) as exc:
            raise SlurmCommandError(
                f"batched path query: answer for {request.path} unreadable: {exc}"
            ) from None
    return answers


def _entries(payload: bytes) -> dict[str, Entry]:
    entries = {}
    for record in payload.split(b"\0"):
        if not record:
            continue
        kind, size, mtime, rel = record.decode(errors="surrogateescape").split(" ", 3)
        entries[rel] = Entry(kind, int(size), float(mtime))
    return entries


class NotFetched(Exception):  # a signal to fetch more, not an error
    """A condition asked for something this round did not fetch; the next round will."""


@dataclass(frozen=True)
class AnswerIndex:
    """One round's answers by path: built once per round and shared by every wait reading it (built
    per wait, indexing N answers for each of N waits was most of a 2,800-wait triggerer's CPU)."""

    trees: Mapping[str, Answer]
    reads: Mapping[tuple[str, int, int], Answer]

    @classmethod
    def of(cls, answers: Mapping[Read, Answer]) -> AnswerIndex:
        trees = {a.request.path: a for a in answers.values() if a.request.kind == "tree"}
        reads = {
            (a.request.path, a.request.a, a.request.b): a
            for a in answers.values()
            if a.request.kind == "read"
        }
        return cls(trees, reads)


class BatchedFiles:
    """A condition's remote files, served from one round's answers (see ``RemoteFiles``).

    Every call is recorded in ``asked`` (the requests the next round should repeat); a call the
    answers do not cover is recorded too and raises ``NotFetched``.
    """

    def __init__(
        self, answers: Mapping[Read, Answer], where: str = "", index: AnswerIndex | None = None
    ) -> None:
        index = index if index is not None else AnswerIndex.of(answers)
        self._trees, self._reads = index.trees, index.reads
        self.where = where
        self.asked: dict[Read, None] = {}

    def _miss(self, request: Read) -> NotFetched:
        self.asked[request] = None
        return NotFetched(f"{request.kind} {request.path}")

    def _lookup(self, path: str, below: int) -> tuple[Read, str, Entry | None, Answer] | None:
        """``path``'s entry (relative name, entry) in a fetched tree holding ``below`` levels under it.

        None when no fetched tree covers it; the entry is None when one does and the path is absent.
        """
        path = path.rstrip("/") or "/"  # a name with a line break may be listed, only not requested
        rel: list[str] = []
        root = path
        while True:
            answer = self._trees.get(root)
            if answer is not None and len(rel) + below <= answer.request.a:
                name = "/".join(reversed(rel))
                return answer.request, name, answer.entries.get(name) if answer.found else None, answer
            parent = posixpath.dirname(root)
            if parent == root or not parent:
                return None
            rel.append(posixpath.basename(root))
            root = parent

    async def list_dir(self, path: str) -> list[str]:
        found = self._lookup(path, 1)
        if found is None:
            raise self._miss(tree(path, 1))
        request, rel, entry, answer = found
        self.asked[request] = None
        if entry is None or entry.kind != "d":
            raise RemotePathNotFoundError(path, self.where)
        prefix = f"{rel}/" if rel else ""
        names = (r[len(prefix) :] for r in answer.entries if r.startswith(prefix))
        return sorted(n for n in names if n and "/" not in n)

    async def stat(self, path: str) -> RemoteStat:
        found = self._lookup(path, 0)
        if found is None:
            raise self._miss(tree(path, 0))
        request, _, entry, _ = found
        self.asked[request] = None
        if entry is None or entry.kind == "l":  # "l" under find -L: a dangling link, as stat sees it
            return RemoteStat(path=path, exists=False)
        return RemoteStat(
            path=path, exists=True, is_dir=entry.kind == "d", size=entry.size, mtime=entry.mtime
        )

    async def read_text(self, path: str) -> str:
        answer = self._read(read(path))
        return answer.data.decode(errors="replace")

    async def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        answer = self._read(read(path, offset, max_bytes))
        log_window.read_window(path, answer.size, offset, max_bytes)  # logs a file that shrank
        at_eof = answer.start + len(answer.data) >= answer.size
        return log_window.decode_chunk(answer.data, answer.start, at_eof=at_eof)

    def _read(self, request: Read) -> Answer:
        answer = self._reads.get((request.path, request.a, request.b))
        if answer is None:
            raise self._miss(request)
        self.asked[request] = None
        if not answer.found:
            raise RemotePathNotFoundError(request.path, self.where)
        return answer
