"""One fake Slurm cluster for unit tests and benches: answers like ``AsyncSlurmHook`` from memory.

For pure logic (a trigger's loop, the poller's batching) and for faults a real cluster cannot
produce on demand (a lost connection for exactly N calls, a state Slurm prints that the plugin does
not know). The real thing is the local cluster (tests/fixtures/slurm_cluster.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmConnectionError
from slurm_operator.model.records import CommandResult, JobRecord, JobStates, LogChunk, RemoteStat
from slurm_operator.model.states import SlurmState

LOST_CONNECTION = "ssh: connection refused"


class FakeSlurm:
    """Job states, files and commands in memory, answering the async hook's verbs.

    The test sets the state and reads what was asked; nothing moves on its own:

    - ``states``: one ``{job_id: state}`` per poll round, consumed in order, the last one repeated
      (a FAILED job exits 3, every other 0; its elapsed time is ``clock - started``).
    - ``raw_state``: what Slurm printed, for a state the plugin cannot know (else the state's name).
    - ``nodes``: job id -> its NodeList as sacct prints it (a hostlist: ``n[1-2]``; absent: none),
      for a node fault a one-node local cluster cannot produce.
    - ``clock``: the cluster's clock (``remote_now``; 0 answers None), moved only by the test
      (``advance``), never by real time; ``started``: its value at the job's start.
    - ``files``: path -> text (read_log, read_text, stat); ``dirs``: path -> names (list_dir);
      ``mtimes``: path -> mtime of the paths a poll watches (absent: the path does not exist).
    - ``down``: the next N calls, of any verb, fail like a lost connection.
    - ``command_out``: what ``run`` prints.

    Recorded: ``calls`` (the job ids of each job_states), ``watched`` (its watched paths),
    ``commands`` (each command run), ``cancelled`` and ``marked`` (each cancel's job id and keywords).
    """

    def __init__(self) -> None:
        self.states: list[dict[str, SlurmState]] = []
        self.raw_state = ""
        self.nodes: dict[str, str] = {}
        self.clock = 0.0
        self.started = 0.0
        self.files: dict[str, str] = {}
        self.dirs: dict[str, list[str]] = {}
        self.mtimes: dict[str, float] = {}
        self.down = 0
        self.command_out = "1\n"
        self.calls: list[list[str]] = []
        self.watched: list[list[str]] = []
        self.commands: list[str] = []
        self.cancelled: list[str] = []
        self.marked: list[dict[str, Any]] = []

    def advance(self, seconds: float) -> None:
        """Move the cluster's clock."""
        self.clock += seconds

    def _connect(self) -> None:
        if self.down:
            self.down -= 1
            raise SlurmConnectionError(LOST_CONNECTION)

    async def job_states(self, job_ids: Sequence[str], watch: Sequence[str] = ()) -> JobStates:
        self.calls.append(list(job_ids))  # asked, whether or not the connection holds
        self.watched.append(list(watch))
        self._connect()
        now = (self.states.pop(0) if len(self.states) > 1 else self.states[0]) if self.states else {}
        run = int(self.clock - self.started)
        records = {
            job_id: JobRecord(
                job_id=job_id,
                name="n",
                state=state,
                exit_code=3 if state is SlurmState.FAILED else 0,
                elapsed=f"{run // 60}:{run % 60:02d}",
                raw_state=self.raw_state or state.value,
                node_list=self.nodes.get(job_id, ""),
            )
            for job_id, state in now.items()
            if job_id in job_ids
        }
        files = {
            p: RemoteStat(p, exists=p in self.mtimes, size=1, mtime=self.mtimes.get(p, 0.0)) for p in watch
        }
        return JobStates(
            records=records, source="sacct", authoritative=True, remote_now=self.clock or None, files=files
        )

    async def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        self._connect()
        if path not in self.files:
            raise RemotePathNotFoundError(path)
        data = self.files[path].encode()[offset : offset + max_bytes]
        return LogChunk(text=data.decode(), offset=offset, next_offset=offset + len(data))

    async def read_text(self, path: str) -> str:
        self._connect()
        if path not in self.files:
            raise RemotePathNotFoundError(path)
        return self.files[path]

    async def stat(self, path: str) -> RemoteStat:
        self._connect()
        return RemoteStat(path, exists=path in self.files, size=len(self.files.get(path, "").encode()))

    async def list_dir(self, path: str) -> list[str]:
        self._connect()
        if path not in self.dirs:
            raise RemotePathNotFoundError(path)
        return self.dirs[path]

    async def run(self, command: str, **_: Any) -> CommandResult:
        self._connect()
        self.commands.append(command)
        return CommandResult(0, self.command_out, "")

    async def cancel(self, job_id: str, signal: str | None = None, **marked: Any) -> None:
        self._connect()
        self.cancelled.append(job_id)
        self.marked.append(marked)
