"""AsyncSlurmHook against the real local cluster: one shared connection, reconnect after sshd restarts."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time

import pytest
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmConnectionError, SlurmSubmitError
from slurm_operator.model.states import TERMINAL_STATES, SlurmState

from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = pytest.mark.slurm


async def wait_terminal(hook: AsyncSlurmHook, ids: list[str], deadline_s: float) -> dict[str, SlurmState]:
    deadline = time.monotonic() + deadline_s
    while True:
        states = await hook.job_states(ids)
        got = {i: r.state for i, r in states.records.items() if i in ids}
        if len(got) == len(ids) and all(s in TERMINAL_STATES for s in got.values()):
            return got
        assert time.monotonic() < deadline, f"not finished after {deadline_s} s: {got}"
        await asyncio.sleep(0.3)


async def test_verbs_share_one_connection(slurm_cluster: LocalCluster) -> None:
    hook = AsyncSlurmHook(slurm_cluster.conn_id)
    try:
        jobs = slurm_cluster.jobs_dir
        ok, bad = await asyncio.gather(
            hook.submit(script="#!/bin/bash\necho hi\n", sbatch_args=[f"--output={jobs}/async-%j.out"]),
            hook.submit(
                script="#!/bin/bash\nexit 3\n",
                upload_to=f"{jobs}/async/fail.sh",
                sbatch_args=["--output=/dev/null"],
                environment={"X": "1"},
            ),
        )
        # Many callers (other hook instances: other triggers) at once, all over the same connection.
        others = [AsyncSlurmHook(slurm_cluster.conn_id) for _ in range(12)]
        answers = await asyncio.gather(*(o.job_states([ok, bad]) for o in others))
        assert all(a.source == "sacct" for a in answers)
        assert await wait_terminal(hook, [ok, bad], 30) == {ok: SlurmState.COMPLETED, bad: SlurmState.FAILED}
        assert (await hook.job_states([bad])).records[bad].exit_code == 3

        assert (await hook.read_log(f"{jobs}/async-{ok}.out")).text == "hi\n"
        assert await hook.list_dir(f"{jobs}/async") == ["fail.sh"]
        st = await hook.stat(f"{jobs}/async/fail.sh")
        assert (st.exists, st.is_dir, st.size) == (True, False, len("#!/bin/bash\nexit 3\n"))
        assert not (await hook.stat(f"{jobs}/async/missing")).exists
        with pytest.raises(RemotePathNotFoundError, match="remote path not found: /nonexistent"):
            await hook.read_text("/nonexistent")
        with pytest.raises(SlurmSubmitError, match="Invalid account"):
            await hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=["--account=nope"])
        assert hook.shared.connections_opened == 1
        assert hook.shared is others[0].shared
    finally:
        await hook.close()


def _drop_sshd(cluster: LocalCluster) -> None:
    """Kill the listening sshd (by its pid file) and its per-connection children: the link drops."""
    pid = cluster.pid("sshd")
    assert pid is not None
    children = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    for child in [pid, *map(int, children.stdout.split())]:
        os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while cluster.pid("sshd") is not None:
        assert time.monotonic() < deadline, "sshd did not stop"
        time.sleep(0.05)


async def test_reconnects_after_sshd_restart(slurm_cluster: LocalCluster) -> None:
    hook = AsyncSlurmHook(slurm_cluster.conn_id, reconnect_attempts=4)
    try:
        job = await hook.submit(script="#!/bin/bash\ntrue\n", sbatch_args=["--output=/dev/null"])
        await wait_terminal(hook, [job], 30)
        assert hook.shared.connections_opened == 1

        _drop_sshd(slurm_cluster)
        # While sshd is down, a hook that may not retry says so clearly, and never reports a state.
        impatient = AsyncSlurmHook(slurm_cluster.conn_id, reconnect_attempts=0)
        with pytest.raises(SlurmConnectionError, match="connection refused"):
            await impatient.job_states([job])
        await asyncio.to_thread(slurm_cluster.up)

        states = await hook.job_states([job])  # the next poll reconnects and succeeds
        assert states.records[job].state is SlurmState.COMPLETED
        assert hook.shared.connections_opened == 2
    finally:
        await hook.close()
        if slurm_cluster.pid("sshd") is None:
            slurm_cluster.up()


async def test_connection_faults(slurm_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = json.loads(slurm_cluster.airflow_conn_json)
    conn["extra"]["host_key"] = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvYtW4zQ0WG4Qp5ZnXlB2dqq3pBVv1pHcKJ2rT6lYkC"
    )
    monkeypatch.setenv("AIRFLOW_CONN_ASYNC_BAD_HOST_KEY", json.dumps(conn))
    with pytest.raises(SlurmConnectionError, match="unknown or mismatched host key"):
        await AsyncSlurmHook("async_bad_host_key", reconnect_attempts=0).run("true")
    with pytest.raises(SlurmConnectionError, match="SSH connection 'async_nope' is unusable"):
        await AsyncSlurmHook("async_nope").run("true")
