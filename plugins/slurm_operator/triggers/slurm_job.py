"""SlurmJobTrigger: wait for a Slurm job (shared batched poller); remote-path waits are in path_triggers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model import events
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.model.naming import ON_KILL_REASON, cancel_marker_path, fatal_marker
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import TERMINAL_STATES, SlurmState
from slurm_operator.policy import fatal
from slurm_operator.policy.watchdog import (
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_UNKNOWN_TIMEOUT,
    Alarm,
    Clocks,
    Watchdog,
)
from slurm_operator.remote.log_window import complete_lines
from slurm_operator.triggers.job_poller import PollResult, SlurmPoller
from slurm_operator.triggers.job_success import end_task_here
from slurm_operator.triggers.relay_position import RelayBook, XComPositionStore
from slurm_operator.triggers.serialization import arguments, class_path

# Log reads per poll are capped so one chatty job cannot stall the shared event loop.
_LOG_READ_BYTES = 1 << 20
# Seconds an on_kill waits for a cancelled job to end before relaying its last lines.
LAST_LINES_WAIT = 10.0
# Seconds the final event is held after the wait's last log record, in a triggerer. The triggerer's
# supervisor reads log records and the runner's "trigger finished" on two sockets, the log one 4 KiB
# per select round; a "finished" read first closes the trigger's log file, and records still queued
# behind it go to the triggerer's own log instead of the task's (apache/airflow#66158 has the
# large-record half of this). The runner reports a finished trigger within 1 s of its event.
LOG_SETTLE_SECONDS = 3.0


def _event(**kwargs: Any) -> TriggerEvent:
    return TriggerEvent(SlurmEvent(**kwargs).to_payload())  # type: ignore[no-untyped-call]


def _says_less(record: JobRecord, note: str) -> bool:
    """Whether a PENDING record says less than the note already given: no reason, or the same reason
    without its estimate. So reads a job squeue --start has let go of while sacct still says PENDING
    (it is starting, or was cancelled): the last note stands rather than a line saying less."""
    if not record.reason:
        return True
    return not record.expected_start and note.startswith(f"{record.reason}, est. start ")


def _fatal_data(hit: tuple[str, str] | None) -> dict[str, Any]:
    """The event's ``data`` for a fatal rule the wait saw match: its name and the line."""
    return {} if hit is None else {"fatal": hit[0], "fatal_line": hit[1]}


class SlurmJobTrigger(BaseTrigger):
    """Wait until one Slurm job ends, relaying its new log lines into the task log meanwhile.

    :param ssh_conn_id: Airflow SSH connection of the cluster's login node.
    :param job_id: the Slurm job id.
    :param poll_interval: seconds between state queries (batched with every other job of the cluster).
    :param log_path: the job's log file (``%j`` already expanded), relayed from ``log_offset`` on.
    :param log_offset: byte offset already relayed at deferral. A re-created trigger (triggerer
        restart, another triggerer) continues from the position it stored (``relay_position``).
    :param stream_logs: relay new log lines as ``[slurm <id>] ...`` into the trigger's (= task's) log.
    :param failure_budget: seconds without one successful poll before giving up with an error event.
    :param missing_polls: authoritative polls that do not know the job before giving up.
    :param cancel_on_kill: scancel the job when a user marks the deferred task failed/success or clears it.
    :param carry: JSON the operator needs on resume, echoed in the event (dag.test() drops defer kwargs).
    :param min_defer_seconds: the final event waits until the trigger has run this long (a
        scheduler race of Airflow 3.3.2: docs/slurm-operator.md#airflow-332-workarounds).
    :param unknown_timeout: seconds the job may stay in a state the plugin cannot classify (UNKNOWN,
        or one a newer Slurm adds) before the wait ends with an error event; the job is left alone.
    :param progress_timeout: seconds without a change of the log or any of ``progress_paths``
        while RUNNING before the wait ends with a ``hung`` event; None: no hang detection.
    :param startup_timeout: seconds a job runs before it can be judged hung at all.
    :param progress_paths: more files whose change means progress (the log always counts).
    :param progress_pattern: a regex whose group 1 is the progress the job's log reports (an
        integer: a training iteration); once it matched, only a new high of it or a change of
        ``progress_paths`` is progress, a log that merely grows is not (``watchdog.ProgressMark``;
        needs ``stream_logs``).
    :param fatal_patterns: name -> patterns (``policy.fatal``: a regex, ``{"pattern": regex,
        "repeats": m}`` or ``{"pattern": regex, "above_median": k, "repeats": m, "window": w}``),
        searched in the running job's new log lines as they are relayed (needs ``stream_logs``): on
        a match the trigger cancels the job at once and ends the wait with a ``fatal`` event naming
        the rule and the line; the operator never resubmits it.
    :param end_task_on_success: a COMPLETED job whose ``completion_regex`` (over its log tail) and
        ``completion_command`` both pass ends the task as a success from here (``TaskSuccessEvent``,
        after writing the XCom the operator would return): no task process resumes to judge it.
        Any other end, a check that fails or cannot run, and ``dag.test()``'s inline run: the
        operator judges as before.
    """

    def __init__(
        self,
        ssh_conn_id: str,
        job_id: str,
        poll_interval: float = 60.0,
        log_path: str | None = None,
        log_offset: int = 0,
        stream_logs: bool = True,
        failure_budget: float = 1800.0,
        missing_polls: int = 10,
        cancel_on_kill: bool = True,
        carry: dict[str, Any] | None = None,
        min_defer_seconds: float = 10.0,
        unknown_timeout: float = DEFAULT_UNKNOWN_TIMEOUT,
        progress_timeout: float | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        progress_paths: list[str] | None = None,
        end_task_on_success: bool = False,
        completion_regex: str | None = None,
        completion_command: str | None = None,
        progress_pattern: str | None = None,
        fatal_patterns: dict[str, list[Any]] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.progress_pattern = progress_pattern
        self.fatal_patterns = fatal_patterns
        self.end_task_on_success = end_task_on_success
        self.completion_regex = completion_regex
        self.completion_command = completion_command
        self.ssh_conn_id = ssh_conn_id
        self.job_id = job_id
        self.unknown_timeout = unknown_timeout
        self.progress_timeout = progress_timeout
        self.startup_timeout = startup_timeout
        self.progress_paths = list(progress_paths or [])
        self.min_defer_seconds = min_defer_seconds
        self.poll_interval = poll_interval
        self.log_path = log_path
        self.log_offset = log_offset
        self.stream_logs = stream_logs
        self.failure_budget = failure_budget
        self.missing_polls = missing_polls
        self.cancel_on_kill = cancel_on_kill
        self.carry = carry or {}
        self._last_record_at: float | None = None  # when the last log record went out (run())

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """This class's import path and every constructor argument (a subclass's own included)."""
        return class_path(type(self)), arguments(self, type(self))

    def watchdog(self) -> Watchdog:
        """The judgments of this wait; the watched files are the log and ``progress_paths``."""
        paths = [self.log_path] if self.log_path else []
        reads_log = bool(self.stream_logs and self.log_path)
        return Watchdog(
            job_id=self.job_id,
            unknown_timeout=self.unknown_timeout,
            progress_timeout=self.progress_timeout,
            startup_timeout=self.startup_timeout,
            paths=tuple(dict.fromkeys([*paths, *self.progress_paths])),
            # The mark reads the relayed lines: without them it would never see progress.
            progress_pattern=self.progress_pattern if reads_log else None,
            fatal=fatal.parse_rules(self.fatal_patterns) if reads_log else (),
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Yield exactly one final event: ended (what Slurm said; the operator judges it), hung or error."""
        started = time.monotonic()
        watch = self._watch()
        try:
            event = await anext(watch)
        finally:
            await watch.aclose()  # unsubscribes from the poller
        # Exactly one event leaves run(); held until the scheduler is surely past the deferral, and
        # until the supervisor has read the wait's last log records into the task log.
        hold = started + self.min_defer_seconds
        if self._last_record_at is not None and self._in_triggerer():
            hold = max(hold, self._last_record_at + LOG_SETTLE_SECONDS)
        await asyncio.sleep(max(0.0, hold - time.monotonic()))
        yield event

    async def _watch(self) -> AsyncGenerator[TriggerEvent, None]:
        dog = self.watchdog()
        watch = dog.paths if dog.watching else ()
        sub = SlurmPoller.for_conn(self.ssh_conn_id).subscribe(self.job_id, self.poll_interval, watch)
        hook = AsyncSlurmHook(self.ssh_conn_id)
        relaying = bool(self.stream_logs and self.log_path)
        # The relay position's store also keeps the watchdog's clocks (relay_position), relaying or not.
        store = XComPositionStore.of(self.task_instance)
        book = RelayBook(self.job_id, self.log_path or "", self.log_offset, store, self.log)
        try:
            last_ok = time.monotonic()
            missing = 0
            pending: str | None = None  # the pending note last logged: one line per change
            while True:
                res = await sub.next()
                if res.error is not None:
                    if time.monotonic() - last_ok > self.failure_budget:
                        yield self._error(
                            f"no answer from the cluster for {self.failure_budget:.0f} s: {res.error}",
                            book.offset,
                        )
                        return
                    continue
                last_ok = time.monotonic()
                record = res.record
                if record is None:
                    # squeue/scontrol forget finished jobs, so only accounting's silence counts as missing.
                    missing += res.authoritative
                    if missing >= self.missing_polls:
                        yield self._error(
                            f"job {self.job_id} is unknown to Slurm after {missing} polls", book.offset
                        )
                        return
                    continue
                missing = 0
                note, pending = pending, record.pending_note()
                if pending is not None and note is not None and _says_less(record, note):
                    pending = note
                if pending is not None and pending != note:
                    self.log.info("Slurm job %s pending: %s", self.job_id, pending)
                terminal = record.state in TERMINAL_STATES
                await self._ready(book, dog, wait=False)
                if relaying and record.state is not SlurmState.PENDING:
                    await self._relay_log(hook, book, final=terminal, dog=dog, seen=res, record=record)
                if terminal:
                    ended = f"ended {record.state.value} (exit code {record.exit_code})"
                    if relaying:
                        self.log.info("Slurm job %s: %s", self.job_id, book.summary())
                        self._last_record_at = time.monotonic()
                    if (
                        record.state is SlurmState.COMPLETED
                        and self.end_task_on_success
                        and self._in_triggerer()
                    ):
                        success = await end_task_here(self, hook, record, book.offset)
                        if success is not None:
                            yield success
                            return
                    data = {**_fatal_data(dog.fatal_hit), **dog.progress()}
                    message = f"Slurm job {self.job_id} {ended}"
                    yield self._final(events.ENDED, message, record, book.offset, data)
                    return
                alarm = dog.observe(record, now=res.polled_at, remote_now=res.remote_now, files=res.files)
                # A clock that started: kept before it counts. The pending note: for a UI (relay_position).
                await book.keep(dog.clocks().to_dict(), pending)
                if alarm is not None and alarm.kind == "fatal":
                    # At once, here: every poll interval more is the whole allocation's time.
                    self.log.warning("Slurm job %s: %s", self.job_id, alarm.message)
                    cancelled = await self._cancel_fatal(hook, alarm)
                    data = {**_fatal_data(dog.fatal_hit), **dog.progress(), "cancelled": cancelled}
                    yield self._final(events.FATAL, alarm.message, record, book.offset, data)
                    return
                if alarm is not None:
                    # Hung: the operator cancels and resubmits. Unclassifiable: the wait fails, job kept.
                    self.log.warning("Slurm job %s: %s", self.job_id, alarm.message)
                    status = events.HUNG if alarm.kind == "hung" else events.ERROR
                    yield self._final(status, alarm.message, record, book.offset, dog.progress())
                    return
        except Exception as exc:
            # Anything unexpected still ends the wait with one event; the traceback goes to the log.
            self.log.exception("SlurmJobTrigger for job %s crashed", self.job_id)
            yield self._error(f"trigger crashed: {type(exc).__name__}: {exc}", book.offset)
        finally:
            sub.close()
            book.close()

    def _in_triggerer(self) -> bool:
        """A triggerer hands each trigger its task instance; ``dag.test()``'s inline run does not, and
        there an event that ends the task would reach the resume method as a bare state string."""
        return self.task_instance is not None

    def _final(
        self, status: str, message: str, record: JobRecord, offset: int, data: dict[str, Any] | None = None
    ) -> TriggerEvent:
        """The final event about a job Slurm reported on: with its state, exit code and record."""
        return _event(
            status=status,
            message=message,
            job_id=self.job_id,
            slurm_state=record.state.value,
            exit_code=record.exit_code,
            log_offset=offset,
            record=record,
            data=data or {},
            carry=self.carry,
        )

    async def _cancel_fatal(self, hook: AsyncSlurmHook, alarm: Alarm) -> bool:
        """scancel the job whose log matched a fatal rule, with our marker; False when that failed
        (the operator tries again)."""
        marker = cancel_marker_path(self.log_path) if self.log_path else None
        try:
            await hook.cancel(
                self.job_id, marker=marker, reason=fatal_marker(alarm.rule or "", alarm.line or "")
            )
        except SlurmError as exc:
            self.log.warning("Slurm job %s: scancel failed: %s", self.job_id, exc)
            return False
        self.log.info("Slurm job %s cancelled: %s", self.job_id, alarm.rule)
        return True

    async def on_success(self, hook: AsyncSlurmHook) -> None:
        """Before the task succeeds from here: what its operator does on success (subclasses)."""

    def _error(self, message: str, offset: int) -> TriggerEvent:
        return _event(
            status=events.ERROR, message=message, job_id=self.job_id, log_offset=offset, carry=self.carry
        )

    async def _ready(self, book: RelayBook, dog: Watchdog | None, *, wait: bool) -> bool:
        """``book.ready``, and once it knows the stored value: the watchdog continues its clocks."""
        if not await book.ready(wait=wait):
            return False
        if dog is not None and not dog.resumed:
            dog.resume(Clocks.from_value(book.clocks))
            if book.clocks:
                self.log.info("Slurm job %s: watchdog clocks continue from %s", self.job_id, book.clocks)
        return True

    async def _relay_log(
        self,
        hook: AsyncSlurmHook,
        book: RelayBook,
        *,
        final: bool,
        dog: Watchdog | None = None,
        seen: PollResult | None = None,
        record: JobRecord | None = None,
    ) -> str:
        """Log the new complete lines of the job log, after storing the position past them (and the
        clocks ``dog`` has after reading them, in the same store); -> them."""
        assert self.log_path is not None
        if not await self._ready(book, dog, wait=final):
            return ""  # where an earlier run of this trigger got to is not known yet: relay nothing
        try:
            chunk = await hook.read_log(self.log_path, book.offset, _LOG_READ_BYTES)
        except RemotePathNotFoundError:
            return ""  # the job has not opened its log yet
        except SlurmError as exc:
            self.log.warning("could not read %s: %s", self.log_path, exc)
            return ""
        text, next_offset = complete_lines(chunk, final=final)
        clocks = None
        if dog is not None:
            # Lines seen twice (a failed store) add no progress.
            dog.saw_log(text, seen.remote_now if seen else None, record.elapsed if record else "")
            clocks = dog.clocks().to_dict()
        if text and await book.advance(next_offset, final=final, clocks=clocks):
            # One record for the whole read, right after the store: the triggerer writes it to the
            # task log whole or not at all, and one record's envelope instead of one per line
            # shortens the time it spends in the triggerer's pipe (see relay_position).
            self.log.info("%s", "\n".join(f"[slurm {self.job_id}] {line}" for line in text.splitlines()))
            self._last_record_at = time.monotonic()
        return text

    async def on_kill(self) -> None:
        """A user acted on the deferred task: cancel the job so it does not run on unattended."""
        if self.cancel_on_kill:
            await self._cancel("task killed while deferred")
            await self.relay_last_lines()

    async def relay_last_lines(self, limit_s: float = LAST_LINES_WAIT) -> None:
        """After a cancel here: relay what the job prints while it shuts down (a trainer's final save,
        the error its launcher reports), once Slurm says it ended or after ``limit_s`` (the
        triggerer gives a whole ``on_kill`` 30 s). Needs the task instance (its relay position)."""
        ti = self.task_instance
        if not (self.stream_logs and self.log_path) or ti is None:
            return
        hook = AsyncSlurmHook(self.ssh_conn_id)
        deadline = time.monotonic() + limit_s
        try:
            while time.monotonic() < deadline:
                record = (await hook.job_states([self.job_id])).records.get(self.job_id)
                if record is None or record.state in TERMINAL_STATES:
                    break
                await asyncio.sleep(1.0)
            book = RelayBook(self.job_id, self.log_path, self.log_offset, XComPositionStore.of(ti), self.log)
            try:
                await self._relay_log(hook, book, final=True)
            finally:
                book.close()
        except SlurmError as exc:  # the cancel is done; only the last lines are lost
            self.log.warning("Slurm job %s: could not relay its last lines: %s", self.job_id, exc)

    async def on_task_stopped(self, state: str) -> None:
        """The deferred task was set to ``state`` (failed, success) by someone else, seen outside any
        triggerer (``slurm_operator.listener``, in the process that set it): cancel the job."""
        if self.cancel_on_kill:
            await self._cancel(f"task set to {state} while deferred")

    async def _cancel(self, why: str) -> None:
        self.log.info("%s: scancel %s", why, self.job_id)
        marker = cancel_marker_path(self.log_path) if self.log_path else None  # says it was us
        await AsyncSlurmHook(self.ssh_conn_id).cancel(self.job_id, marker=marker, reason=ON_KILL_REASON)
