"""SlurmHook against the real local cluster over real SSH (jobs run concurrently: submit all, poll all)."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.exceptions import (
    RemotePathNotFoundError,
    SlurmConnectionError,
    SlurmSubmitError,
    SlurmSubmitLimitError,
)
from slurm_operator.model.records import JobStates
from slurm_operator.model.states import TERMINAL_STATES, SlurmState
from slurm_operator.policy.watchdog import elapsed_seconds
from slurm_operator.remote import commands, parsers
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from tests.fixtures.slurm_cluster import LocalCluster, free_ports

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def hook(slurm_cluster: LocalCluster) -> Iterator[SlurmHook]:
    with SlurmHook(slurm_cluster.conn_id) as h:
        yield h


def poll_until_terminal(hook: SlurmHook, ids: list[str], deadline_s: float) -> JobStates:
    deadline = time.monotonic() + deadline_s
    while True:
        states = hook.job_states(ids)
        if all(i in states.records and states.records[i].state in TERMINAL_STATES for i in ids):
            return states
        if time.monotonic() > deadline:
            raise AssertionError(f"jobs not finished after {deadline_s} s: {states}")
        time.sleep(0.5)


def sacct_truth(cluster: LocalCluster, ids: list[str]) -> dict[str, tuple[str, str]]:
    """What sacct itself prints (state word, ExitCode) for these jobs, asked over plain ssh."""
    out = cluster.ssh(f"sacct -X -P -n -o JobID,State,ExitCode -j {','.join(ids)}")
    assert out.returncode == 0, out.stderr
    rows = [line.split("|") for line in out.stdout.splitlines() if line]
    return {job: (state.split()[0], code) for job, state, code in rows}


def test_job_lifecycle_states_match_sacct(hook: SlurmHook, slurm_cluster: LocalCluster) -> None:
    jobs = slurm_cluster.jobs_dir
    out = [f"--output={jobs}/%x-%j.out"]
    ok = hook.submit(script="#!/bin/bash\necho ok-$GREETING\n", sbatch_args=[*out, "-J", "ok"],
                     environment={"GREETING": "a b,c"})  # fmt: skip
    fail = hook.submit(script="#!/bin/bash\nexit 3\n", upload_to=f"{jobs}/scripts/fail.sh", sbatch_args=out)
    cancel = hook.submit(script="#!/bin/bash\nsleep 300\n", sbatch_args=[*out, "-p", "booster"])
    # Held until the child's pending reason is seen: on a loaded machine the controller's scheduling
    # pass can come later than a short-lived parent's end, and the child would then just run.
    parent = hook.submit(script="#!/bin/bash\nsleep 2\n", sbatch_args=[*out, "--hold"])
    child = hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=[*out, f"--dependency=afterok:{parent}"])
    array = hook.submit(
        script='#!/bin/bash\n[ "$SLURM_ARRAY_TASK_ID" = 1 ] && exit 2\ntrue\n',
        sbatch_args=[f"--output={jobs}/arr-%A_%a.out", "--array=0-2"],
    )
    assert len({ok, fail, cancel, parent, child, array}) == 6

    first = hook.job_states([child, cancel])  # one command for both
    assert set(first.records) == {child, cancel}
    # The controller sets the pending reason on its next scheduling pass, not at submission.
    # The reason arrives with a scheduling pass (periodic every sched_interval = 60 s when the
    # event-driven one is deferred under load) and then through slurmdbd: seconds, rarely a minute.
    deadline = time.monotonic() + 120
    while (held := hook.job_states([child]).records[child]).reason != "Dependency":
        assert held.state is SlurmState.PENDING, held
        assert time.monotonic() < deadline, f"no Dependency reason: {held}"
        time.sleep(0.5)
    assert held.exit_code is None
    released = slurm_cluster.ssh(f"scontrol release {parent}")
    assert released.returncode == 0, released.stderr
    deadline = time.monotonic() + 20
    while hook.job_states([cancel]).records[cancel].state is not SlurmState.RUNNING:
        assert time.monotonic() < deadline, "the sleep job never started"
        time.sleep(0.2)
    hook.cancel(cancel)

    ids = [ok, fail, cancel, parent, child, array]
    # The array's task rows too: under load, accounting once had no row for task 0 yet while the
    # array's record was already final (fresh clone, 2026-12-02: KeyError on "<array>_0" below).
    tasks = [f"{array}_{i}" for i in range(3)]
    states = poll_until_terminal(hook, [*ids, *tasks], deadline_s=60)
    assert states.source == "sacct"
    assert states.authoritative
    rec = states.records
    assert (rec[ok].state, rec[ok].exit_code, rec[ok].name) == (SlurmState.COMPLETED, 0, "ok")
    assert (rec[fail].state, rec[fail].exit_code) == (SlurmState.FAILED, 3)
    assert rec[cancel].state is SlurmState.CANCELLED
    assert rec[cancel].raw_state.startswith("CANCELLED by ")
    assert rec[child].state is SlurmState.COMPLETED
    assert (rec[f"{array}_0"].state, rec[f"{array}_2"].state) == (SlurmState.COMPLETED, SlurmState.COMPLETED)
    assert (rec[f"{array}_1"].state, rec[f"{array}_1"].exit_code) == (SlurmState.FAILED, 2)
    whole = rec[array]  # the whole array failed; its reason lists every record it aggregates
    assert (whole.state, whole.exit_code) == (SlurmState.FAILED, 2), (whole, states.source)

    truth = sacct_truth(slurm_cluster, ids)
    for job, (state, code) in truth.items():
        if job == array:
            # sacct can list the task that kept the array's id as a bare row of its own (fresh clone,
            # 2026-12-05, under load): one task's state, not the array's, which aggregates them (above).
            task_rows = {(rec[t].state.value, f"{rec[t].exit_code}:{rec[t].signal}") for t in tasks}
            assert (state, code) in task_rows, (job, truth)
            continue
        assert rec[job].state.value == state, job
        assert f"{rec[job].exit_code}:{rec[job].signal}" == code, job
    assert (jobs / f"ok-{ok}.out").read_text() == "ok-a b,c\n"


def test_unknown_job_is_absent_not_finished(hook: SlurmHook) -> None:
    states = hook.job_states(["9999999"])
    assert states.records == {}
    assert states.authoritative  # sacct answered: the cluster really does not know it


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--account=nosuchaccount"], "Invalid account or account/partition combination"),
        (["--partition=nosuch"], "Invalid partition name specified"),
        (["--gres=gpu:4"], "Invalid generic resource"),
        (["--mem=100000G"], "Memory specification can not be satisfied"),
    ],
)
def test_refused_submissions_say_why(hook: SlurmHook, args: list[str], message: str) -> None:
    with pytest.raises(SlurmSubmitError, match=message) as info:
        hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=args)
    assert not isinstance(info.value, SlurmSubmitLimitError)


def test_missing_script_path(hook: SlurmHook) -> None:
    with pytest.raises(SlurmSubmitError, match=r"Unable to open file /nonexistent/job\.sh"):
        hook.submit(script_path="/nonexistent/job.sh")


def test_submit_argument_errors(hook: SlurmHook) -> None:
    with pytest.raises(ValueError, match="exactly one of script= and script_path="):
        hook.submit()
    with pytest.raises(ValueError, match="upload_to= needs script="):
        hook.submit(script_path="/x.sh", upload_to="/y.sh")


def test_find_active_jobs(hook: SlurmHook, slurm_cluster: LocalCluster) -> None:
    name = f"autoexp-find-{time.time_ns()}"
    job = hook.submit(script="#!/bin/bash\nsleep 60\n", sbatch_args=["-J", name, "--output=/dev/null"])
    try:
        found = hook.find_active_jobs(name)
        assert [r.job_id for r in found] == [job]
        assert found[0].state in {SlurmState.PENDING, SlurmState.RUNNING}
        assert hook.find_active_jobs(name + "-other") == []
    finally:
        hook.cancel(job)


def test_one_command_submits_from_a_copy_and_a_second_submitter_adopts(
    hook: SlurmHook, slurm_cluster: LocalCluster
) -> None:
    """The real flock, squeue and sbatch: a second submitter of the name gets the first one's job,
    claiming no copy; each submission is ONE remote command."""
    name = f"autoexp-once-{time.time_ns()}"
    base = f"{slurm_cluster.jobs_dir}/{name}"
    spec = commands.AttemptSubmit(
        f"{base}/scripts/{name}",
        1,
        sbatch_args=["-J", name, f"--output={base}/logs/%j.out"],
        log_dir=f"{base}/logs",
        lock_path=f"{base}/locks/submit.lock",
        name=name,
    )
    before = hook.commands_run
    first = hook.submit_attempt(spec, "#!/bin/bash\nsleep 60\n")
    try:
        assert (first.number, first.adopted, hook.commands_run - before) == (1, False, 1)
        again = hook.submit_attempt(spec, "#!/bin/bash\n")
        assert again == parsers.Submitted(None, first.job_id, adopted=True)
        with pytest.raises(ValueError, match=r"give exactly one of script= and spec\.source"):
            hook.submit_attempt(spec)
    finally:
        hook.cancel(first.job_id)
    assert Path(f"{base}/scripts/{name}.attempt001.sbatch").read_text() == "#!/bin/bash\nsleep 60\n"
    assert sorted(os.listdir(f"{base}/scripts")) == [f"{name}.attempt001.sbatch"]
    assert [r.job_id for r in hook.find_active_jobs(name)] in ([], [first.job_id])  # ending, never a second


def test_files_written_into_one_folder_create_it_once(hook: SlurmHook, slurm_cluster: LocalCluster) -> None:
    """A run's stage writes a dozen scripts into one folder: one ``mkdir -p``, not one per script."""
    base = f"{slurm_cluster.jobs_dir}/folders-{time.time_ns()}"
    before = hook.commands_run
    for i in range(12):
        hook.write_text(f"{base}/scripts/{i}.sh", f"#{i}\n")
    assert hook.commands_run - before == 1
    hook.write_text(f"{base}/other/a.txt", "a\n")
    assert hook.commands_run - before == 2
    assert sorted(hook.list_dir(f"{base}/scripts")) == sorted(f"{i}.sh" for i in range(12))
    assert hook.read_text(f"{base}/other/a.txt") == "a\n"


def test_files(hook: SlurmHook, slurm_cluster: LocalCluster, tmp_path: Path) -> None:
    base = f"{slurm_cluster.jobs_dir}/files-{time.time_ns()}"
    hook.write_text(f"{base}/deep/a.txt", "héllo\nworld\n")
    assert hook.read_text(f"{base}/deep/a.txt") == "héllo\nworld\n"
    assert hook.list_dir(f"{base}/deep") == ["a.txt"]  # no temporary file left behind
    st = hook.stat(f"{base}/deep/a.txt")
    assert (st.exists, st.is_dir, st.size) == (True, False, 13)
    assert hook.stat(f"{base}/deep").is_dir
    assert not hook.stat(f"{base}/missing").exists

    chunk = hook.read_log(f"{base}/deep/a.txt", offset=0, max_bytes=2)  # cuts "é" in half
    assert (chunk.text, chunk.next_offset) == ("h", 1)
    rest = hook.read_log(f"{base}/deep/a.txt", offset=chunk.next_offset)
    assert (rest.text, rest.next_offset) == ("éllo\nworld\n", 13)
    assert hook.read_log(f"{base}/deep/a.txt", offset=13).text == ""

    local = tmp_path / "up.sh"
    local.write_text("#!/bin/bash\n")
    hook.upload_file(local, f"{base}/up.sh")
    assert hook.read_text(f"{base}/up.sh") == "#!/bin/bash\n"
    with pytest.raises(FileNotFoundError, match="local file to upload not found"):
        hook.upload_file(tmp_path / "nope", f"{base}/x")

    for call in (hook.read_text, hook.list_dir, hook.read_log):
        with pytest.raises(RemotePathNotFoundError, match=f"remote path not found: {base}/missing on root@"):
            call(f"{base}/missing")


def test_run_reports_exit_status_and_timeout(hook: SlurmHook) -> None:
    res = hook.run("echo out; echo err >&2; exit 3")
    assert (res.exit_status, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert hook.run("cat", stdin="piped").stdout == "piped"
    with pytest.raises(Exception, match=r"remote command timed out after 0.5 s"):
        hook.run("sleep 5", timeout=0.5)


# -- connection faults: a real sshd refusing, real keys not matching ---------------------------------


def _conn(monkeypatch: pytest.MonkeyPatch, cluster: LocalCluster, conn_id: str, **changes: object) -> str:
    conn = json.loads(cluster.airflow_conn_json)
    extra = {**conn["extra"], **changes.pop("extra", {})}  # type: ignore[dict-item]
    conn.update(changes, extra={k: v for k, v in extra.items() if v is not None})
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return conn_id


def _keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_wrong_client_key(
    monkeypatch: pytest.MonkeyPatch, slurm_cluster: LocalCluster, tmp_path: Path
) -> None:
    key = _keygen(tmp_path / "other")
    conn = _conn(monkeypatch, slurm_cluster, "bad_key", extra={"key_file": str(key)})
    with pytest.raises(
        SlurmConnectionError, match=r"cannot connect to root@127.0.0.1:\d+ .*authentication failed"
    ):
        SlurmHook(conn).run("true")


def test_wrong_host_key(monkeypatch: pytest.MonkeyPatch, slurm_cluster: LocalCluster, tmp_path: Path) -> None:
    other = (_keygen(tmp_path / "fakehost").with_suffix(".pub")).read_text().split()
    conn = _conn(monkeypatch, slurm_cluster, "bad_host_key", extra={"host_key": f"{other[0]} {other[1]}"})
    with pytest.raises(SlurmConnectionError, match="host key does not match"):
        SlurmHook(conn).run("true")


def test_unknown_host_key(monkeypatch: pytest.MonkeyPatch, slurm_cluster: LocalCluster) -> None:
    conn = _conn(monkeypatch, slurm_cluster, "no_host_key", extra={"host_key": None})
    with pytest.raises(SlurmConnectionError, match="unknown host key"):
        SlurmHook(conn).run("true")


def test_nothing_listening(monkeypatch: pytest.MonkeyPatch, slurm_cluster: LocalCluster) -> None:
    (port,) = free_ports(1)
    conn = _conn(monkeypatch, slurm_cluster, "refused", port=port)
    with pytest.raises(SlurmConnectionError, match="connection refused"):
        SlurmHook(conn, connect_retries=0).run("true")


def test_unreachable_host(monkeypatch: pytest.MonkeyPatch, slurm_cluster: LocalCluster) -> None:
    # 192.0.2.0/24 is TEST-NET-1: never routed, so the connect attempt times out (or is unreachable).
    conn = _conn(monkeypatch, slurm_cluster, "unreachable", host="192.0.2.1", extra={"conn_timeout": 1})
    with pytest.raises(SlurmConnectionError, match=r"cannot connect to root@192\.0\.2\.1"):
        SlurmHook(conn, connect_retries=0).run("true")


def test_undefined_connection() -> None:
    with pytest.raises(SlurmConnectionError, match="SSH connection 'no_such_conn' is unusable"):
        SlurmHook("no_such_conn").run("true")


def test_slurmctld_down(hook: SlurmHook, slurm_cluster: LocalCluster) -> None:
    job = hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=["--output=/dev/null"])
    poll_until_terminal(hook, [job], deadline_s=30)
    pid = slurm_cluster.pid("slurmctld")
    assert pid is not None
    subprocess.run(["kill", str(pid)], check=True)
    try:
        deadline = time.monotonic() + 15
        while slurm_cluster.pid("slurmctld") is not None:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        # Accounting still answers for a finished job: the state is known without the controller.
        assert hook.job_states([job]).records[job].state is SlurmState.COMPLETED
        with pytest.raises(SlurmSubmitError, match="Unable to contact slurm controller"):
            hook.submit(script="#!/bin/bash\ntrue\n")
    finally:
        slurm_cluster.up()
    assert hook.job_states([job]).records[job].state is SlurmState.COMPLETED


@pytest.mark.slow
def test_timeout_and_purged_job(hook: SlurmHook, slurm_cluster: LocalCluster) -> None:
    """--time=1 ends in TIMEOUT (~80-90 s: slurmctld checks limits every ~30 s); by then the quick job
    has left slurmctld's memory (MinJobAge=30), and sacct still reports it."""
    quick = hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=["--output=/dev/null"])
    slow = hook.submit(script="#!/bin/bash\nsleep 300\n", sbatch_args=["--output=/dev/null", "--time=1"])
    states = poll_until_terminal(hook, [quick, slow], deadline_s=150)
    rec = states.records[slow]
    assert (rec.state, rec.exit_code) == (SlurmState.TIMEOUT, 0)
    assert states.records[quick].state is SlurmState.COMPLETED
    deadline = time.monotonic() + 60
    while slurm_cluster.ssh(f"squeue -h -j {quick}").returncode == 0:  # rc 1 "Invalid job id" once purged
        assert time.monotonic() < deadline, "slurmctld never purged the finished job"
        time.sleep(1)
    again = hook.job_states([quick])
    assert (again.source, again.records[quick].state) == ("sacct", SlurmState.COMPLETED)
    assert sacct_truth(slurm_cluster, [slow]) == {slow: ("TIMEOUT", "0:0")}


def test_job_states_with_watched_paths_is_one_command_with_the_clusters_clock(
    hook: SlurmHook, slurm_cluster: LocalCluster
) -> None:
    """Hang detection's inputs from the real cluster: sacct's Elapsed of a RUNNING job, the remote
    clock and the stats of the watched files, all from the one batched command (sync and async hook)."""
    jobs = slurm_cluster.jobs_dir / "watched"
    jobs.mkdir(exist_ok=True)
    log = jobs / "odd name-$(x).out"
    job = hook.submit(
        script="#!/bin/bash\necho started\nsleep 60\n", sbatch_args=[f"--output={log}", "--time=2"]
    )
    try:
        missing = str(jobs / "latest_checkpointed_iteration.txt")
        deadline = time.monotonic() + 60
        while True:
            before = hook.commands_run
            states = hook.job_states([job], [str(log), missing])
            assert hook.commands_run == before + 1
            record = states.records[job]
            # The log's stat comes from the same answer (a local look could see it appear later).
            started = states.files[str(log)].exists
            if record.state is SlurmState.RUNNING and elapsed_seconds(record.elapsed) and started:
                break
            assert time.monotonic() < deadline, states
            time.sleep(0.5)
        assert states.remote_now is not None
        assert abs(states.remote_now - time.time()) < 5  # the same machine here: same clock
        elapsed = elapsed_seconds(record.elapsed)
        assert elapsed is not None
        assert 0 < elapsed < 60
        assert states.files[str(log)].exists
        assert states.files[str(log)].mtime == pytest.approx(log.stat().st_mtime, abs=1)
        assert not states.files[missing].exists

        async def ask() -> JobStates:
            async_hook = AsyncSlurmHook(slurm_cluster.conn_id)
            try:
                return await async_hook.job_states([job], [str(log)])
            finally:
                await async_hook.close()

        again = asyncio.run(ask())
        assert again.files[str(log)] == states.files[str(log)]
        assert again.remote_now is not None
    finally:
        hook.cancel(job)


def test_a_pending_job_s_reason_and_estimate_come_with_its_state(
    hook: SlurmHook, slurm_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """squeue --start in the one batched command: a held job (``sbatch --hold``) reads JobHeldUser
    and a job held by a dependency Dependency, neither with an estimate (N/A); one held by
    ``--begin`` has its begin time as the estimate. The local cluster's backfill also
    estimates Priority/Resources waits (seen: a year on, behind a job without a time limit), but
    only after a backfill pass (~30 s), so they are not waited for here."""
    out = [f"--output={slurm_cluster.jobs_dir}/pending-%j.out"]
    parent = hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=[*out, "--hold"])
    child = hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=[*out, f"--dependency=afterok:{parent}"])
    later = hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=[*out, "--begin=now+1hour"])
    submitted = time.time()
    try:
        # The controller sets a pending reason on its next scheduling pass, not at submission.
        deadline = time.monotonic() + 120
        while True:
            before = hook.commands_run
            states = hook.job_states([parent, child, later])
            rec = states.records
            assert hook.commands_run == before + 1  # one SSH round trip, squeue --start included
            reasons = (rec[parent].reason, rec[child].reason, rec[later].reason)
            # Until accounting lists the jobs, squeue's own section answers (it has %r and %S too);
            # the pending section is what gives the jobs sacct lists their live reason.
            if states.source == "sacct" and reasons == ("JobHeldUser", "Dependency", "BeginTime"):
                break
            assert time.monotonic() < deadline, rec
            time.sleep(0.5)
        assert rec[parent].pending_note() == "JobHeldUser, no start estimate yet"
        assert rec[child].expected_start is None  # squeue --start says N/A
        assert rec[child].pending_note() == "Dependency, no start estimate yet"
        estimate = rec[later].expected_start
        assert estimate is not None
        begin = datetime.datetime.fromisoformat(estimate).timestamp()  # local time: this machine
        assert begin == pytest.approx(submitted + 3600, abs=120)
        assert rec[later].pending_note() == f"BeginTime, est. start {estimate[:16]}"

        async def watch() -> SlurmEvent:
            """The real trigger on the real poller: it logs the note once, then sees the cancel."""
            trigger = SlurmJobTrigger(
                slurm_cluster.conn_id, later, poll_interval=0.5, stream_logs=False, min_defer_seconds=0
            )
            waiting = asyncio.create_task(anext(aiter(trigger.run())))
            await asyncio.sleep(3)  # several polls of an unchanged pending job
            await asyncio.to_thread(hook.cancel, later)
            event = await asyncio.wait_for(waiting, timeout=60)
            return SlurmEvent.from_payload(event.payload)

        capsys.readouterr()
        event = asyncio.run(watch())
        assert event.slurm_state == "CANCELLED"
        lines = [
            line for line in capsys.readouterr().out.splitlines() if f"Slurm job {later} pending:" in line
        ]
        assert len(lines) == 1, lines
        assert f"Slurm job {later} pending: BeginTime, est. start {estimate[:16]}" in lines[0]
        print(lines[0], file=sys.stderr)  # shown with -rA: the line a task log gets
    finally:
        for job in (child, parent, later):
            hook.cancel(job)
