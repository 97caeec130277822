"""SlurmOperator checks that need no cluster: argument validation, event checks, hung and unknown jobs."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException
from slurm_operator.airflow_public import AirflowFailException
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmCommandError
from slurm_operator.model.ledger import HUNG, Attempt, Ledger
from slurm_operator.model.records import JobRecord, JobStates, LogChunk, RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.operators.arguments import ending_kwargs
from slurm_operator.operators.slurm import SlurmOperator
from slurm_operator.operators.worker_wait import wait_in_worker
from slurm_operator.policy import recovery
from slurm_operator.triggers import slurm_job
from slurm_operator.triggers.job_poller import SlurmPoller
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from tests.support.fake_slurm import FakeSlurm


def _op(**kwargs: Any) -> SlurmOperator:
    base: dict[str, Any] = {
        "task_id": "train",
        "ssh_conn_id": "c",
        "script": "#!/bin/bash\ntrue\n",
        "remote_dir": "/scratch/run",
    }
    return SlurmOperator(**{**base, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"script_path": "/x.sbatch"}, "give exactly one of script or script_path"),
        ({"script": None}, "give exactly one of script or script_path"),
        ({"remote_dir": "run"}, "remote_dir must be an absolute path, got 'run'"),
        ({"output_path": "/r/train.out"}, r"output_path '/r/train.out' must contain %j"),
        ({"completion_regex": "(unclosed"}, r"completion_regex '\(unclosed': missing \)"),
        (
            {"max_attempts": 0},
            "max_attempts, max_attempts_without_progress and max_attempts_overall must be >= 1",
        ),
        ({"max_attempts_overall": 0}, "max_attempts, max_attempts_without_progress and max_attempts_overall"),
        (
            {"fatal_patterns": {"DIVERGED": ["(nan"]}},
            r"fatal_patterns\['DIVERGED'\]\[0\] '\(nan': missing \)",
        ),
        (
            {"fatal_patterns": {"DEAD": [{"pattern": "x", "repeats": 0}]}},
            r"fatal_patterns\['DEAD'\]\[0\]\.repeats: expected an integer >= 1, got 0",
        ),
        (
            {"fatal_patterns": {"SPIKE": [{"pattern": r"loss: (\S+)", "above_median": 0.5}]}},
            r"fatal_patterns\['SPIKE'\]\[0\]\.above_median: expected a number > 1, got 0\.5",
        ),
        (
            {"fatal_patterns": {"DEAD": "x"}},
            r"fatal_patterns\['DEAD'\]: expected a list of patterns, got 'x'",
        ),
        ({"progress_pattern": r"iteration \d+"}, r"progress_pattern .*: needs a group: its group 1 is"),
        ({"sbatch_args": ["--job-name=x"]}, "sbatch_args '--job-name=x': set job_name / output_path"),
        ({"sbatch_args": ["-o", "/x"]}, "sbatch_args '-o': set job_name / output_path"),
        ({"unknown_timeout": 0}, r"unknown_timeout must be > 0, .* got 0, None, 7200"),
        ({"progress_timeout": -1}, r"unknown_timeout must be > 0, progress_timeout and startup_timeout >= 0"),
        ({"startup_timeout": -1}, r"unknown_timeout must be > 0, progress_timeout and startup_timeout >= 0"),
    ],
)
def test_validation_names_the_task_and_the_bad_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(AirflowException, match=f"^task train: {message}"):
        _op(**kwargs)._validate()


def test_valid_arguments_pass() -> None:
    _op(output_path="/r/train-%j.out", completion_regex="after training is done")._validate()


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ("done", "malformed trigger event: event: expected a dict, got str"),
        ({"status": "maybe", "message": "m"}, "malformed trigger event: event.status: 'maybe' is not one of"),
        ({"status": "success", "message": "m"}, "trigger event has no attempt record: m"),
    ],
)
def test_resume_rejects_events_off_the_schema(event: Any, message: str) -> None:
    with pytest.raises(AirflowException, match=f"^task train: {message}"):
        _op().execute_complete({}, event=event)  # type: ignore[arg-type]


def test_resume_turns_an_error_event_into_an_error_naming_job_and_log() -> None:
    carry = {"attempts": [{"attempt": 1, "job_id": "42", "log_path": "/r/a-42.out", "script_path": "/s"}]}
    event = SlurmEvent(status="error", message="no answer from the cluster for 1800 s", carry=carry)
    with pytest.raises(AirflowException, match=r"^Slurm job 42 \(/r/a-42.out\): no answer from the cluster"):
        _op().execute_complete({}, event=event.to_payload())  # type: ignore[arg-type]


class _Store:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self, key: str) -> Any:
        assert key == "slurm_operator"
        return self.value


class _Hook:
    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.markers: list[tuple[str | None, str]] = []

    def cancel(
        self, job_id: str, signal: str | None = None, *, marker: str | None = None, reason: str = ""
    ) -> None:
        self.cancelled.append(job_id)
        self.markers.append((marker, reason))


@pytest.mark.parametrize(("error", "cancelled"), [("Trigger timeout", ["7"]), ("Trigger failure", [])])
def test_a_timed_out_deferral_cancels_the_job_a_failed_trigger_does_not(
    error: str, cancelled: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trigger timeouts need a scheduler: the decision is checked here, the real run in integration/."""
    op = _op()
    hook = _Hook()
    monkeypatch.setattr(op, "_hook", lambda: hook)
    carry = {"attempts": [{"attempt": 1, "job_id": "7", "log_path": "/r/a-7.out", "script_path": "/s"}]}
    context: Any = {"task_state_store": _Store(carry)}
    with pytest.raises(AirflowException, match=f"^{error}$"):
        op.resume_execution("__fail__", {"error": error}, context)
    assert hook.cancelled == cancelled
    if cancelled:  # a cancel of ours: the marker tells a later try it was not a person's
        assert hook.markers == [("/r/a-7.out.airflow-cancel", "execution_timeout: the deferral timed out")]


class _Cluster:
    """The sync hook's verbs the judgment of an ended or hung attempt uses."""

    def __init__(self, *, cancel_fails: bool = False) -> None:
        self.cancelled: list[str] = []
        self.markers: list[tuple[str | None, str]] = []
        self.cancel_fails = cancel_fails
        self.records: dict[str, JobRecord] = {}

    def cancel(
        self, job_id: str, signal: str | None = None, *, marker: str | None = None, reason: str = ""
    ) -> None:
        if self.cancel_fails:
            raise SlurmCommandError("scancel: error: Kill job error on job id 7: Access/permission denied")
        self.cancelled.append(job_id)
        self.markers.append((marker, reason))

    def job_states(self, job_ids: list[str], watch: Any = ()) -> JobStates:
        return JobStates(records={j: self.records[j] for j in job_ids if j in self.records})

    def stat(self, path: str) -> Any:
        raise RemotePathNotFoundError(path)


class _RwStore(_Store):
    def set(self, key: str, value: Any, retention: Any = None) -> None:
        self.value = value


def _attempt(n: int, state: str = "RUNNING") -> dict[str, Any]:
    job = str(6 + n)
    return Attempt.from_dict(
        {"attempt": n, "job_id": job, "log_path": f"/r/a-{job}.out", "script_path": "/s", "state": state}
    ).to_dict()


def _hung_event(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    job = attempts[-1]["job_id"]
    record = JobRecord(job_id=job, name="n", state=SlurmState.RUNNING, elapsed="00:00:40")
    return SlurmEvent(
        status="hung",
        message=f"job {job} made no progress for 25 s",
        job_id=job,
        slurm_state="RUNNING",
        record=record,
        carry={"name": "n", "attempts": attempts, "baseline": None, "log_offset": 0},
    ).to_payload()


def test_a_hung_job_is_cancelled_recorded_hung_and_resubmitted(monkeypatch: pytest.MonkeyPatch) -> None:
    op, cluster = _op(), _Cluster()
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    resubmitted: list[list[dict[str, Any]]] = []
    monkeypatch.setattr(op, "_submit", lambda _c, _h, ledger: resubmitted.append(ledger.results()))
    monkeypatch.setattr(op, "_wait", lambda _c, _h, ledger: ledger.results())
    store = _RwStore(None)
    op.execute_complete({"task_state_store": store}, event=_hung_event([_attempt(1)]))  # type: ignore[arg-type]
    assert cluster.cancelled == ["7"]
    assert cluster.markers == [("/r/a-7.out.airflow-cancel", "hung: job 7 made no progress for 25 s")]
    (attempts,) = resubmitted
    assert (attempts[0]["state"], attempts[0]["elapsed"]) == (HUNG, "00:00:40")
    assert attempts[0]["extra"] == {
        "hung": "job 7 made no progress for 25 s",
        "why_ended": "HUNG: job hung (its watched files stopped changing) and was cancelled",
    }
    assert store.value["attempts"][0]["state"] == HUNG  # recorded for a later try before resubmitting


def test_a_job_that_always_hangs_fails_the_task_at_the_no_progress_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op, cluster = _op(max_attempts_without_progress=2), _Cluster()
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    event = _hung_event([_attempt(1, HUNG), _attempt(2)])
    with pytest.raises(
        AirflowException, match=r"^Slurm job 8 HUNG \(exit code None\), attempt 2: job hung .*"
    ) as err:
        op.execute_complete({"task_state_store": _RwStore(None)}, event=event)  # type: ignore[arg-type]
    reason = str(err.value).splitlines()[0]
    assert "but the last 2 attempt(s) made no progress (max_attempts_without_progress=2)" in reason
    assert cluster.cancelled == ["8"]


class _AsksWork(SlurmOperator):
    """An operator with a rule of its own, counting the attempts it is asked about."""

    def __init__(self, *, done: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.done = done
        self.asked: list[str] = []

    def is_work_done(self, hook: Any, attempt: Attempt) -> bool | None:
        self.asked.append(attempt.job_id)
        return self.done


def _ended_event(state: SlurmState) -> dict[str, Any]:
    record = JobRecord(job_id="7", name="n", state=state, exit_code=0)
    return SlurmEvent(
        status="ended",
        message=f"Slurm job 7 ended {state.value}",
        job_id="7",
        slurm_state=state.value,
        record=record,
        carry={"name": "n", "attempts": [_attempt(1)], "baseline": None, "log_offset": 0},
    ).to_payload()


@pytest.mark.parametrize(("done", "verdict"), [(True, "succeed"), (False, "resubmit")])
def test_the_work_done_rule_is_asked_once_for_a_completed_job_and_its_answer_judged(
    monkeypatch: pytest.MonkeyPatch, done: bool, verdict: str
) -> None:
    op = _AsksWork(done=done, task_id="train", ssh_conn_id="c", script="#!/bin/bash\n", remote_dir="/r")
    monkeypatch.setattr(op, "_hook", _Cluster)
    monkeypatch.setattr(op, "_wait", lambda _c, _h, ledger: ledger.results())
    monkeypatch.setattr(op, "_submit", lambda *_: None)
    store = _RwStore(None)
    op.execute_complete({"task_state_store": store}, event=_ended_event(SlurmState.COMPLETED))  # type: ignore[arg-type]
    last = store.value["attempts"][-1]
    assert (op.asked, last["completion_ok"], last["verdict"]) == (["7"], done, verdict)


def test_the_work_done_rule_is_not_asked_for_a_job_that_did_not_complete(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    op = _AsksWork(done=True, task_id="train", ssh_conn_id="c", script="#!/bin/bash\n", remote_dir="/r")
    monkeypatch.setattr(op, "_hook", _Cluster)
    with pytest.raises(
        AirflowException, match=r"^Slurm job 7 FAILED \(exit code 0\), attempt 1: job ended FAILED"
    ):
        op.execute_complete({"task_state_store": _RwStore(None)}, event=_ended_event(SlurmState.FAILED))  # type: ignore[arg-type]
    assert op.asked == []


def test_a_hung_job_that_cannot_be_cancelled_is_not_resubmitted(monkeypatch: pytest.MonkeyPatch) -> None:
    op = _op()
    monkeypatch.setattr(op, "_hook", lambda: _Cluster(cancel_fails=True))
    monkeypatch.setattr(op, "_submit", lambda *_: pytest.fail("resubmitted next to a job that may still run"))
    with pytest.raises(
        AirflowException, match=r"^Slurm job 7 hung \(job 7 made no progress for 25 s\), and scancel failed"
    ):
        op.execute_complete({}, event=_hung_event([_attempt(1)]))  # type: ignore[arg-type]


def test_the_retry_of_a_wait_that_gave_up_on_an_unknown_state_reattaches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = _Cluster()
    cluster.records["7"] = JobRecord("7", "n", SlurmState.UNKNOWN, raw_state="LAUNCH_FAILED")
    carry = {"name": "n", "attempts": [_attempt(1)], "baseline": None, "log_offset": 0, "window": 0}
    start = recovery.start_try(
        cluster,  # type: ignore[arg-type]
        carry,
        "n",
        output_pattern="/r/a-%j.out",
        try_number=None,
        probe=lambda _hook: None,
    )
    assert (start.action, start.ledger.to_dict()) == ("wait", carry)


class _Polls:
    """job_states answers scripted per poll; read_log of a growing log."""

    def __init__(self, answers: list[JobStates]) -> None:
        self.answers = answers
        self.watched: list[list[str]] = []
        self.log = "step 1\nstep 2\nhal"

    def job_states(self, job_ids: list[str], watch: Any = ()) -> JobStates:
        self.watched.append(list(watch))
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        data = self.log.encode()[offset:]
        return LogChunk(data.decode(), offset, offset + len(data))


def _spec(**kwargs: Any) -> SlurmJobTrigger:
    base: dict[str, Any] = {"ssh_conn_id": "c", "job_id": "7", "poll_interval": 60, "log_path": "/r/a-7.out"}
    return SlurmJobTrigger(**{**base, **kwargs})


def _states(state: SlurmState, raw: str = "", elapsed: str = "", **kw: Any) -> JobStates:
    record = JobRecord("7", "n", state, elapsed=elapsed, raw_state=raw or state.value)
    return JobStates(records={"7": record}, **kw)


def test_the_worker_wait_bounds_an_unknown_state_like_the_trigger() -> None:
    polls = _Polls([_states(SlurmState.UNKNOWN, raw="LAUNCH_FAILED")])
    clock = iter(range(0, 10_000, 60))  # each poll is one interval later on the wall clock
    sleeps: list[float] = []
    with pytest.raises(
        AirflowException,
        match=r"^Slurm job 7 \(/r/a-7.out\): job 7 has been in state 'LAUNCH_FAILED'.* for 30 min",
    ):
        wait_in_worker(
            polls,  # type: ignore[arg-type]
            _spec(unknown_timeout=1800),
            lambda _t: None,
            sleep=sleeps.append,
            wall=lambda: float(next(clock)),
        )
    assert len(sleeps) == 30  # 31 polls, one interval apart: no real sleep


def test_the_worker_wait_relays_complete_lines_and_reports_a_hang() -> None:
    log = "/r/a-7.out"
    stat = RemoteStat(log, exists=True, size=3, mtime=1000.0)
    running = _states(SlurmState.RUNNING, elapsed="00:01:00", remote_now=1060.0, files={log: stat})
    polls = _Polls([running])
    relayed: list[str] = []
    ended = wait_in_worker(
        polls,  # type: ignore[arg-type]
        _spec(progress_timeout=30, startup_timeout=10),
        relayed.append,
        sleep=lambda _t: None,
    )
    assert ended.hung is not None
    assert ended.hung.message.startswith("job 7 made no progress for 1 min")
    assert relayed == ["step 1\nstep 2\n"]  # the half-written line waits for the next read
    assert ended.offset == len("step 1\nstep 2\n")
    assert polls.watched == [[log]]  # statted by the state query itself


class OwnRule(SlurmOperator):
    def is_work_done(self, hook: Any, attempt: Attempt) -> bool | None:
        return True


@pytest.mark.parametrize(
    ("op", "ends"),
    [
        (_op(end_task_on_success=True, completion_regex="^done", completion_command="check"), True),
        (_op(end_task_on_success=True, completion_command="check"), True),
        (_op(completion_regex="^done"), False),  # not asked for
        (_op(end_task_on_success=True), False),  # no check the trigger could run
        (_op(end_task_on_success=True, completion_regex="^done", completion_check=lambda h, a: True), False),
        (
            OwnRule(
                task_id="t",
                ssh_conn_id="c",
                script="x",
                remote_dir="/r",
                end_task_on_success=True,
                completion_regex="^done",
            ),
            False,
        ),  # its own rule: the trigger cannot run it
    ],
)
def test_the_trigger_ends_the_task_only_with_checks_it_can_run_itself(op: SlurmOperator, ends: bool) -> None:
    kwargs = ending_kwargs(op, op._completion_rule(), op._own_rule())
    assert kwargs.get("end_task_on_success", False) is ends
    if ends:
        assert (kwargs["completion_regex"], kwargs["completion_command"]) == (
            op.completion_regex,
            op.completion_command,
        )


def test_a_task_process_opens_one_connection_to_the_cluster() -> None:
    """Its checks, submission and wait share one hook: each hook is an SSH connection (key exchange)."""
    op = _op()
    first = op._hook()
    assert op._hook() is first
    assert "_slurm_hook" not in op.template_fields
    assert _op()._hook() is not first  # another task, another connection


def test_a_fatal_event_is_recorded_fatal_and_fails_the_task_without_retry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trigger cancelled the job: the operator records the rule and the line, never resubmits,
    and raises AirflowFailException (no retry); it cancels nothing more."""
    op, cluster = _op(fatal_patterns={"DEAD": [{"pattern": "grad norm: 0", "repeats": 2}]}), _Cluster()
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    monkeypatch.setattr(op, "_submit", lambda *_: pytest.fail("resubmitted"))
    event = _hung_event([_attempt(1)])
    event.update(status="fatal", data={"fatal": "DEAD", "fatal_line": "grad norm: 0", "cancelled": True})
    store = _RwStore(None)
    with pytest.raises(
        AirflowFailException, match=r"^Slurm job 7 CANCELLED .* DEAD: its log says 'grad norm: 0'"
    ):
        op.execute_complete({"task_state_store": store}, event=event)  # type: ignore[arg-type]
    (attempt,) = store.value["attempts"]
    assert (attempt["state"], attempt["verdict"]) == ("CANCELLED", "fatal")
    assert attempt["extra"]["fatal"] == "DEAD"
    assert attempt["extra"]["fatal_line"] == "grad norm: 0"
    assert cluster.cancelled == []  # the trigger did
    event["data"]["cancelled"] = False  # its scancel failed: the operator cancels
    with pytest.raises(AirflowFailException):
        op.execute_complete({"task_state_store": _RwStore(None)}, event=event)  # type: ignore[arg-type]
    assert cluster.markers == [("/r/a-7.out.airflow-cancel", "fatal: DEAD: grad norm: 0")]


def test_a_job_that_ended_before_its_fatal_cancel_is_recorded_as_slurm_ended_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The trainer printed its NaN line and exited 1 between the poll that saw the line and the
    scancel (seen in CI: Slurm said FAILED, the record said CANCELLED by us, exit code None): the
    record is Slurm's end, FAILED with exit code 1, still judged fatal by its rule, never resubmitted."""
    op, cluster = _op(fatal_patterns={"DIVERGED": ["lm loss: nan"]}), _Cluster()
    failed = JobRecord(job_id="7", name="n", state=SlurmState.FAILED, exit_code=1, elapsed="0:41")
    cluster.records["7"] = failed
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    monkeypatch.setattr(op, "_submit", lambda *_: pytest.fail("resubmitted"))
    event = _hung_event([_attempt(1)])
    event.update(status="fatal", data={"fatal": "DIVERGED", "fatal_line": "lm loss: nan", "cancelled": True})
    store = _RwStore(None)
    with pytest.raises(
        AirflowFailException, match=r"^Slurm job 7 FAILED \(exit code 1\), attempt 1: DIVERGED: its log says"
    ):
        op.execute_complete({"task_state_store": store}, event=event)  # type: ignore[arg-type]
    (attempt,) = store.value["attempts"]
    assert (attempt["state"], attempt["exit_code"], attempt["verdict"]) == ("FAILED", 1, "fatal")
    assert "cancelled_by_airflow" not in attempt["extra"]
    assert attempt["extra"]["fatal"] == "DIVERGED"


class _Ti:
    def xcom_push(self, key: str, value: Any) -> None: ...


async def test_a_node_fail_is_resubmitted_without_its_node_and_the_exclusion_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """NODE_FAIL on n2 (NodeList, from the same batched state query), then FAILED on n1 twice (each
    fails its try; the retry submits the next attempt): every submission excludes each bad node the
    attempt history holds so far. Debian's local Slurm runs one node, which cannot fail on demand:
    the cluster is the shared fake (tests/support/fake_slurm.py) answering the trigger's poll."""
    fake = FakeSlurm()
    monkeypatch.setattr(SlurmPoller, "hook_factory", staticmethod(lambda _c: fake))
    monkeypatch.setattr(SlurmPoller, "_instances", {})  # none of this test's pollers outlives it
    monkeypatch.setattr(slurm_job, "AsyncSlurmHook", lambda _c: fake)
    op = _op(max_attempts=5)
    monkeypatch.setattr(op, "_hook", lambda: _Cluster())
    submitted: list[list[str]] = []

    def submit(_hook: Any, spec: Any, number: int, try_number: Any, _log: Any) -> Attempt:
        submitted.append(list(spec.sbatch_args))
        job = str(6 + number)
        return Attempt(number, job, f"/r/a-{job}.out", "/s", try_number=try_number)

    monkeypatch.setattr("slurm_operator.operators.slurm.submit_attempt", submit)
    monkeypatch.setattr(op, "_wait", lambda _c, _h, ledger: ledger.results())
    store = _RwStore(None)
    context: Any = {"task_state_store": store, "ti": _Ti()}
    carry: dict[str, Any] = {"name": "n", "attempts": [_attempt(1)], "baseline": None, "log_offset": 0}
    for job, state, node in (("7", SlurmState.NODE_FAIL, "n2"), ("8", SlurmState.FAILED, "n1"),
                             ("9", SlurmState.FAILED, "n1")):  # fmt: skip
        fake.states, fake.nodes = [{job: state}], {job: node}
        trigger = SlurmJobTrigger(
            ssh_conn_id="c-nodes",
            job_id=job,
            poll_interval=0.01,
            log_path=None,
            carry=carry,
            min_defer_seconds=0,
        )
        (event,) = [e.payload async for e in trigger.run()]
        assert event["record"]["node_list"] == node
        if state is SlurmState.FAILED:
            with pytest.raises(AirflowException, match=f"^Slurm job {job} FAILED"):
                op.execute_complete(context, event=event)
            op._submit(context, _Cluster(), Ledger.from_dict(store.value))  # type: ignore[arg-type]  # the retry
        else:
            op.execute_complete(context, event=event)
        carry = store.value
    assert submitted == [["--exclude=n2"], ["--exclude=n2"], ["--exclude=n2,n1"]]
    assert [a["extra"].get("excluded_nodes") for a in store.value["attempts"]] == [
        None,
        "n2 (job 7 ended NODE_FAIL on it)",
        "n2 (job 7 ended NODE_FAIL on it)",
        "n2 (job 7 ended NODE_FAIL on it), n1 (the second failed attempt on it was job 9)",
    ]


def test_each_attempt_records_what_it_did_and_why_it_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    op, cluster = _op(), _Cluster()
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    monkeypatch.setattr(op, "_submit", lambda *_: None)
    monkeypatch.setattr(op, "_wait", lambda _c, _h, ledger: ledger.results())
    event = _hung_event([_attempt(1)])
    record = JobRecord(job_id="7", name="n", state=SlurmState.TIMEOUT, elapsed="01:00:00")
    seen = {"progress_at_start": 301, "progress_at_end": 1450, "first_progress_s": 95.0}
    event.update(status="ended", slurm_state="TIMEOUT", record=record.to_dict(), data={"progress": seen})
    store = _RwStore(None)
    op.execute_complete({"task_state_store": store}, event=event)  # type: ignore[arg-type]
    (attempt,) = store.value["attempts"]
    assert attempt["elapsed"] == "01:00:00"
    assert attempt["extra"] == {**seen, "why_ended": "TIMEOUT: job ended TIMEOUT, which is resubmittable"}
