"""The metadata database goes away for 30 s mid-training: the supervised stack comes back by itself.

Without supervision the scheduler, DAG processor and triggerer exit (OperationalError) and nothing
moves until someone starts them again. Here they run under supervisord, as scripts/demo runs them
(scripts/lib/airflow_supervisor.py): the stack is left alone while PostgreSQL is stopped for 30 s and
started again, the training's Slurm job ends meanwhile, and the run must still end in success with
one Slurm job for the training.

PostgreSQL is a private server of this test's own: the session's server is shared by every xdist
worker, and stopping it would break the tests running beside this one.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from tests.e2e.campaign import DAG_ID, REPO, create_pool, job_name, reduced_config
from tests.e2e.test_sweeps import FAKE_CONVERT, FAKE_TRAINER
from tests.fixtures import postgres
from tests.fixtures.airflow_stack import AirflowStack, start_stack
from tests.fixtures.slurm_cluster import LocalCluster
from tests.slurm_operator.integration.faults import sacct_rows

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(2400)]

DOWN_S = 30.0
SUPERVISED = ("scheduler", "dag-processor", "triggerer")
BEATS = {c: f"latest_{c.replace('-', '_')}_heartbeat" for c in SUPERVISED}


@pytest.fixture
def private_postgres() -> Iterator[postgres.TestPostgres]:
    """A PostgreSQL server for this test alone (o+x folder: as root it runs as `postgres`)."""
    folder = Path(tempfile.mkdtemp(prefix="autoexp-pgrestart-"))
    folder.chmod(0o755)
    try:
        pg = postgres.start_server(folder / "pg")
        try:
            yield pg
        finally:
            postgres.stop_server(pg)
    finally:
        postgres.run_script("down", "--dir", str(folder / "pg"))  # idempotent: a server that came up late
        shutil.rmtree(folder, ignore_errors=True)


def beats_after(stack: AirflowStack, after: float) -> bool | None:
    """True once the scheduler, DAG processor and triggerer all heartbeat after ``after`` (epoch s)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{stack.port}/api/v2/monitor/health", timeout=5) as r:
            body = json.load(r)
    except OSError:  # the api-server's database connections are being renewed, or it restarts
        return None
    for component, key in BEATS.items():
        beat = body.get(component.replace("-", "_"), {}).get(key)
        if beat is None or datetime.fromisoformat(beat).timestamp() <= after:
            return None
    return True


def test_a_postgres_restart_mid_training_ends_in_success_with_one_job(
    tmp_path: Path,
    slurm_cluster: LocalCluster,
    private_postgres: postgres.TestPostgres,
    figure: Callable[[str], None],
) -> None:
    trainer, convert = tmp_path / "fake_trainer.py", tmp_path / "fake_convert.sh"
    trainer.write_text(FAKE_TRAINER)
    convert.write_text(FAKE_CONVERT)
    config = reduced_config(
        tmp_path,
        ('TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"', f'TRAIN_SCRIPT: "{trainer}"'),
        (
            'template: "{AUTOEXP_CHECKOUT}/include/sbatch/convert_eval_checkpoint.sh"',
            f'template: "{convert}"',
        ),
    )
    demo_dir = tmp_path / "campaign"
    run_dir = demo_dir / "runs" / "demo_tiny_lr0.003_bs4"
    run_dir.mkdir(parents=True)
    (run_dir / "hold").touch()  # the fake trainer saves 20, then holds before 40 until it is gone
    url = private_postgres.create_database("airflow_restart")
    env = {"AUTOEXP_CONFIGS": str(config), "AUTOEXP_DEMO_DIR": str(demo_dir)}
    stack = start_stack(tmp_path / "home", REPO / "dags", env, supervised=True, database_url=url)
    try:
        create_pool(stack)
        train_job = job_name(config, demo_dir)
        run_id = stack.trigger(DAG_ID, {"phases": ["pretrain"], "max_attempts": 1}, timeout=300)
        started = time.monotonic()
        stack.wait_task_state(DAG_ID, run_id, "pretrain.train", {"deferred"}, timeout=600)
        tracker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
        stack.poll("checkpoint 20", lambda: (tracker.exists() and tracker.read_text() == "20") or None, 300)
        pids = {c: stack.component_pid(c) for c in SUPERVISED}
        assert None not in pids.values(), stack.supervisorctl("status")

        down_at = time.monotonic()
        postgres.run_script("down", "--dir", str(private_postgres.base_dir))
        assert private_postgres.pid() is None
        (run_dir / "hold").unlink()  # the training ends while the database is away
        # No hand on the stack: only supervisord must stay up (check_alive in supervised mode).
        stack.poll("the outage to last", lambda: time.monotonic() - down_at >= DOWN_S or None, DOWN_S + 30)
        restarted = sorted(c for c in SUPERVISED if stack.component_pid(c) != pids[c])
        postgres.run_script("up", "--dir", str(private_postgres.base_dir))
        up_at, up_epoch = time.monotonic(), time.time()
        down_s = up_at - down_at

        stack.poll("fresh heartbeats of all three", lambda: beats_after(stack, up_epoch), 600, 2)
        recovered_s = time.monotonic() - up_at
        restarted = sorted({*restarted, *(c for c in SUPERVISED if stack.component_pid(c) != pids[c])})
        assert stack.wait_run(DAG_ID, run_id, timeout=900, poll=3) == "success", stack.task_states(
            DAG_ID, run_id
        )
        run_s = time.monotonic() - started
        states = stack.task_states(DAG_ID, run_id)
        assert states["pretrain.train"] == "success", states
        jobs = [row[2].split()[0] for row in sacct_rows(slurm_cluster, train_job) if row[1] == train_job]
        assert jobs == ["COMPLETED"], jobs
        assert tracker.read_text() == "40"
        figure(
            f"PostgreSQL down {down_s:.1f} s; components that exited and were restarted by supervisord:"
            f" {', '.join(restarted) or 'none'}; fresh heartbeats of all three {recovered_s:.1f} s after"
            f" it was back; run {run_s:.1f} s from trigger to success; training jobs: {len(jobs)}"
        )
        # The outage really stopped components (what this test is about), and they came back.
        assert restarted, f"no component exited while the database was down:\n{stack.log_tail()}"
        assert "OperationalError" in "".join(stack.log_file(c).read_text(errors="replace") for c in restarted)
    finally:
        stack.stop()
    assert stack.group_pids() == []
