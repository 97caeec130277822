"""A new try's first step, and the meaning of a cancel: the pure decisions, with the cluster faked.

The same paths against real Slurm and a real Airflow (external scancel, clear, retry) are in
integration/test_faults_real.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException
from slurm_operator.airflow_public import AirflowFailException
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmCommandError
from slurm_operator.model.ledger import CANCELLED_BY_AIRFLOW, HUNG, Attempt, Ledger, Verdict
from slurm_operator.model.records import CommandResult, JobRecord, JobStates
from slurm_operator.model.states import SlurmState
from slurm_operator.operators.slurm import SlurmOperator
from slurm_operator.policy import recovery
from slurm_operator.policy.resubmission import decide
from slurm_operator.remote.commands import AttemptSubmit
from slurm_operator.remote.parsers import Submitted, cancelled_by_uid

NAME = "af-d-train-0123456789"


def _attempt(n: int, state: str = "RUNNING", verdict: str | None = None, **kw: Any) -> dict[str, Any]:
    job = str(100 + n)
    return Attempt.from_dict({"attempt": n, "job_id": job, "log_path": f"/r/{NAME}-{job}.out",
                              "script_path": f"/r/s.attempt{n:03d}.sbatch", "state": state,
                              "verdict": verdict, **kw}).to_dict()  # fmt: skip


def _carry(*attempts: dict[str, Any], window: int = 0) -> dict[str, Any]:
    return {"name": NAME, "attempts": list(attempts), "baseline": "b0", "log_offset": 9, "window": window}


class Cluster:
    """The sync hook's verbs a try's start and a cancel's judgment use."""

    def __init__(self) -> None:
        self.records: dict[str, JobRecord] = {}
        self.active: list[JobRecord] = []
        self.files: dict[str, str] = {}
        self.unreadable = False
        self.passwd: dict[str, CommandResult] = {}
        self.ran: list[str] = []
        self.claims: list[tuple[str, int, str]] = []
        self.claimed = 0
        self.submitted: list[dict[str, Any]] = []

    def job_states(self, job_ids: list[str], watch: Any = ()) -> JobStates:
        return JobStates(records={j: self.records[j] for j in job_ids if j in self.records})

    def find_active_jobs(self, name: str) -> list[JobRecord]:
        return self.active

    def read_text(self, path: str) -> str:
        if self.unreadable:
            raise SlurmCommandError("SFTP failed: connection lost")
        if path not in self.files:
            raise RemotePathNotFoundError(path)
        return self.files[path]

    def run(self, command: str, **_: Any) -> CommandResult:
        self.ran.append(command)
        return self.passwd.get(command, CommandResult(2, "", ""))

    def submit_attempt(self, spec: AttemptSubmit, script: str | None = None) -> Submitted:
        self.claims.append((spec.base, spec.first, script or self.files[str(spec.source)]))
        number = max(spec.first, self.claimed)
        self.submitted.append({"script_path": f"{spec.base}.attempt{number:03d}.sbatch"})
        return Submitted(number, "200")

    def stat(self, path: str) -> Any:
        raise RemotePathNotFoundError(path)

    def read_log(self, *args: Any, **kw: Any) -> Any:
        raise RemotePathNotFoundError(str(args[0]))


def _start(
    cluster: Cluster, stored: Any, probes: list[str] | None = None, *, locked: bool = False
) -> recovery.TryStart:
    calls = probes if probes is not None else []
    return recovery.start_try(
        cluster,  # type: ignore[arg-type]
        stored,
        NAME,
        output_pattern=f"/r/{NAME}-%j.out",
        try_number=3,
        probe=lambda _hook: calls.append("probed") or "b1",  # type: ignore[func-returns-value]
        adopts_on_submit=locked,
    )


def test_nothing_recorded_and_nothing_active_submits_with_a_fresh_history() -> None:
    start = _start(Cluster(), None)
    assert start.action == recovery.SUBMIT
    assert start.ledger.to_dict() == {
        "name": NAME,
        "attempts": [],
        "baseline": "b1",
        "log_offset": 0,
        "window": 0,
    }


def test_an_unjudged_attempt_whose_job_runs_is_waited_on_again() -> None:
    cluster = Cluster()
    cluster.records["101"] = JobRecord("101", NAME, SlurmState.RUNNING)
    stored = _carry(_attempt(1))
    start = _start(cluster, stored)
    assert (start.action, start.ledger.to_dict(), start.record) == (recovery.WAIT, stored, False)


def test_an_unjudged_attempt_whose_job_ended_is_judged_with_sacct_s_words() -> None:
    cluster = Cluster()
    cluster.records["101"] = JobRecord(
        "101", NAME, SlurmState.CANCELLED, raw_state="CANCELLED by 0", cancelled_by_uid=0
    )
    start = _start(cluster, _carry(_attempt(1)))
    assert start.action == recovery.JUDGE
    last = start.ledger.to_dict()["attempts"][-1]
    assert (last["state"], last["extra"]) == ("CANCELLED", {"slurm_state": "CANCELLED by 0"})


def test_a_hung_attempt_not_yet_judged_is_judged() -> None:
    assert _start(Cluster(), _carry(_attempt(1, HUNG))).action == recovery.JUDGE


@pytest.mark.parametrize("verdict", [Verdict.FAIL.value, Verdict.SUCCEED.value, None])
def test_after_a_judged_end_the_next_try_submits_with_its_own_budget_and_the_history_kept(
    verdict: str | None,
) -> None:
    """A retry after a failure, a clear after a success or a cancel; None: a terminal state recorded
    before verdicts were (that try judged it)."""
    probes: list[str] = []
    stored = _carry(_attempt(1, "TIMEOUT", "resubmit"), _attempt(2, "FAILED", verdict))
    start = _start(Cluster(), stored, probes)
    assert start.action == recovery.SUBMIT
    assert [a["attempt"] for a in start.ledger.to_dict()["attempts"]] == [1, 2]
    assert (
        start.ledger.to_dict()["window"],
        start.ledger.to_dict()["baseline"],
        start.ledger.to_dict()["log_offset"],
    ) == (2, "b1", 0)
    assert probes == ["probed"]
    assert start.ledger.next_number() == 3


def test_a_try_that_died_between_resubmit_and_submit_goes_on_within_the_same_budget() -> None:
    probes: list[str] = []
    start = _start(Cluster(), _carry(_attempt(1, "TIMEOUT", "resubmit"), window=0), probes)
    assert (start.action, start.ledger.to_dict()["window"], start.ledger.to_dict()["baseline"], probes) == (
        "submit",
        0,
        "b0",
        [],
    )


def test_another_task_instance_s_history_is_not_used() -> None:
    stored = {**_carry(_attempt(1, "FAILED", "fail")), "name": "af-other-0123456789"}
    start = _start(Cluster(), stored)
    assert (start.action, start.ledger.to_dict()["attempts"]) == (recovery.SUBMIT, [])


def test_an_active_job_of_the_name_is_re_attached_numbered_after_the_history() -> None:
    cluster = Cluster()
    cluster.active = [JobRecord("150", NAME, SlurmState.PENDING), JobRecord("151", NAME, SlurmState.RUNNING)]
    start = _start(cluster, _carry(_attempt(1, "FAILED", "fail")))
    assert (start.action, start.record) == (recovery.WAIT, True)
    new = start.ledger.to_dict()["attempts"][-1]
    assert (new["attempt"], new["job_id"], new["reattached"], new["try_number"]) == (2, "151", True, 3)
    assert new["log_path"] == f"/r/{NAME}-151.out"


def test_a_job_of_the_name_already_completing_is_not_taken_over() -> None:
    """Names may be shared across runs: a job ending (another run's stop) is that run's business."""
    cluster = Cluster()
    cluster.active = [JobRecord("152", NAME, SlurmState.COMPLETING)]
    start = _start(cluster, None)
    assert (start.action, start.ledger.attempts) == (recovery.SUBMIT, [])


class Asked(Cluster):
    """Counts the squeue by name that a locked submit makes unneeded."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def find_active_jobs(self, name: str) -> list[JobRecord]:
        self.asked += 1
        return super().find_active_jobs(name)


@pytest.mark.parametrize("stored", [None, _carry(_attempt(1, "FAILED", "fail"))])
def test_a_locked_submit_adopts_by_itself_so_the_try_does_not_ask_squeue_first(stored: Any) -> None:
    cluster = Asked()
    cluster.active = [JobRecord("151", NAME, SlurmState.RUNNING)]
    start = _start(cluster, stored, locked=True)
    assert (start.action, start.record, cluster.asked) == (recovery.SUBMIT, False, 0)
    assert _start(cluster, stored).action == recovery.WAIT  # unlocked: asked, and re-attached
    assert cluster.asked == 1


def test_a_recorded_job_nobody_lists_is_still_looked_for_by_name_before_a_locked_submit() -> None:
    """sacct and squeue did not list the recorded job (just submitted): it may well be active."""
    cluster = Asked()
    cluster.active = [JobRecord("101", NAME, SlurmState.RUNNING)]
    stored = _carry(_attempt(1))
    start = _start(cluster, stored, locked=True)
    assert (start.action, start.ledger.to_dict()["attempts"], cluster.asked) == (
        recovery.WAIT,
        [stored["attempts"][0]],
        1,
    )


def test_the_budget_window_and_an_own_cancel_in_decide() -> None:
    carry = _carry(_attempt(1, "FAILED", "fail"), _attempt(2, "TIMEOUT", "resubmit"), _attempt(3), window=1)
    assert [a.attempt for a in Ledger.from_dict(carry).budget()] == [2, 3]
    own = Attempt(3, "103", "/l", "/s", state=SlurmState.CANCELLED, cancelled_by_airflow="on_kill: stop")
    decision = decide([own], completion_ok=None, max_attempts=5, max_attempts_without_progress=2)
    assert (decision.verdict, decision.reason) == (
        Verdict.RESUBMIT,
        "job was cancelled by Airflow in an earlier try (on_kill: stop)",
    )
    outside = Attempt(3, "103", "/l", "/s", state=SlurmState.CANCELLED)
    decision = decide([outside], completion_ok=None, max_attempts=5, max_attempts_without_progress=2)
    assert decision.verdict is Verdict.FAIL
    # A stopped try's job counts not in the budget of the clear after it: the clear resumes even
    # with max_attempts=1 (the stop was the user's, not the job's failure).
    decision = decide([own], completion_ok=None, max_attempts=1, max_attempts_without_progress=2)
    assert decision.verdict is Verdict.RESUBMIT


# -- the operator's judgment of a CANCELLED job ------------------------------------------------------


class Store:
    def __init__(self, value: Any = None) -> None:
        self.value = value

    def get(self, key: str) -> Any:
        return self.value

    def set(self, key: str, value: Any, retention: Any = None) -> None:
        self.value = value


class TI:
    try_number = 2
    task_id = "train"
    map_index = -1

    def xcom_push(self, key: str, value: Any) -> None:
        pass


def _cancelled_event(raw: str = "CANCELLED by 0") -> dict[str, Any]:
    # as the poll's parser reads sacct's row: who cancelled it, once
    record = JobRecord(
        "101", NAME, SlurmState.CANCELLED, exit_code=0, raw_state=raw, cancelled_by_uid=cancelled_by_uid(raw)
    )
    return SlurmEvent(
        status="ended",
        message="Slurm job 101 ended CANCELLED (exit code 0)",
        job_id="101",
        slurm_state="CANCELLED",
        record=record,
        carry=_carry(_attempt(1, try_number=1)),
    ).to_payload()


def _judge(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, event: dict[str, Any]
) -> tuple[Store, list[Any]]:
    op = SlurmOperator(task_id="train", ssh_conn_id="c", script="#!/bin/bash\n", remote_dir="/r", retries=3)
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    waited: list[Any] = []
    monkeypatch.setattr(
        op, "_wait", lambda _c, _h, ledger: waited.append(ledger.to_dict()) or ledger.results()
    )
    store = Store()
    op.execute_complete({"task_state_store": store, "ti": TI()}, event=event)  # type: ignore[arg-type]
    return store, waited


def test_a_cancel_from_outside_fails_the_task_without_retry_naming_job_who_and_how_to_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    cluster.passwd["getent passwd 0"] = CommandResult(0, "root:x:0:0:root:/root:/bin/bash\n", "")
    with pytest.raises(AirflowFailException) as err:
        _judge(cluster, monkeypatch, _cancelled_event())
    assert str(err.value) == (
        f"Slurm job 101 (attempt 1, log /r/{NAME}-101.out) was cancelled from outside Airflow by root "
        "(uid 0); not retried, since a cancel means stop. To resume, clear this task: its next try "
        "submits the next attempt (the history and its script copies are kept)."
    )
    assert cluster.submitted == []


def test_the_verdict_on_an_outside_cancel_is_recorded_so_a_clear_resumes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    op = SlurmOperator(task_id="train", ssh_conn_id="c", script="#!/bin/bash\n", remote_dir="/r")
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    store = Store()
    with pytest.raises(AirflowFailException, match="by uid 0;"):  # getent could not name it
        op.execute_complete({"task_state_store": store, "ti": TI()}, event=_cancelled_event())  # type: ignore[arg-type]
    last = store.value["attempts"][-1]
    assert (last["verdict"], last["extra"]["cancelled_by"]) == ("fail", "uid 0")
    assert _start(cluster, store.value).action == recovery.SUBMIT  # the clear's try: a new attempt


def test_sacct_naming_nobody_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        AirflowFailException, match=r"by someone sacct does not name \(it printed 'CANCELLED'\)"
    ):
        _judge(Cluster(), monkeypatch, _cancelled_event("CANCELLED"))


@pytest.mark.parametrize(
    ("marker", "state", "extra"),
    [
        (
            "on_kill: the task was stopped\n",
            "CANCELLED",
            {CANCELLED_BY_AIRFLOW: "on_kill: the task was stopped"},
        ),
        ("hung: job 101 made no progress for 1 h\n", HUNG, {"hung": "job 101 made no progress for 1 h"}),
    ],
)
def test_a_cancel_of_ours_found_by_a_later_try_is_resubmitted_with_its_own_meaning(
    marker: str, state: str, extra: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = Cluster()
    cluster.files[f"/r/{NAME}-101.out.airflow-cancel"] = marker
    cluster.claimed = 4  # copies 2 and 3 exist already (a lost history): the claim skips them
    store, waited = _judge(cluster, monkeypatch, _cancelled_event())
    first, second = waited[0]["attempts"]
    assert (first["state"], first["verdict"]) == (state, "resubmit")
    why = first["extra"].pop("why_ended")
    assert first["extra"] == {"slurm_state": "CANCELLED by 0", **extra}
    assert why.startswith(f"{state}: job ")
    assert cluster.claims == [("/r/scripts/" + NAME, 2, "#!/bin/bash\n")]
    assert (second["attempt"], second["script_path"], second["try_number"]) == (
        4, f"/r/scripts/{NAME}.attempt004.sbatch", 2)  # fmt: skip
    assert cluster.submitted[0]["script_path"] == f"/r/scripts/{NAME}.attempt004.sbatch"
    assert cluster.ran == []  # no getent: it was ours
    assert store.value["attempts"][-1]["job_id"] == "200"  # recorded at once, for a rebuilt operator


def test_an_unreadable_marker_fails_the_try_with_retry_and_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster()
    cluster.unreadable = True
    with pytest.raises(
        AirflowException, match=r"cannot read .*airflow-cancel to tell whose cancel ended job 101"
    ) as err:
        _judge(cluster, monkeypatch, _cancelled_event())
    assert not isinstance(err.value, AirflowFailException)
