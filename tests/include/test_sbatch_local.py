"""Must-show on the local Slurm cluster, no Airflow: train, convert+eval every checkpoint, cooldown."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.autoexp_cluster.conftest import DemoData
from tests.include.templates import CONVERT, TRAIN, demo_params, render

pytestmark = [pytest.mark.slurm, pytest.mark.ml, pytest.mark.slow]


def submit(cluster: Any, script: Path, log: Path, env: dict[str, str] | None = None) -> str:
    log.parent.mkdir(parents=True, exist_ok=True)  # AutoExperiment's build creates the log's folder
    proc = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        capture_output=True, text=True, env={**cluster.env(), **(env or {})}, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def wait_done(cluster: Any, job_id: str, log: Path, deadline_s: float = 300) -> str:
    """Poll until the job left the queue; return its sacct state."""
    deadline = time.monotonic() + deadline_s
    env = cluster.env()
    while time.monotonic() < deadline:
        q = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, env=env, check=False
        )
        if not q.stdout.strip():
            break
        time.sleep(1)
    else:
        subprocess.run(["scancel", job_id], env=env, check=False)
        pytest.fail(f"job {job_id} still queued after {deadline_s}s; log {log}:\n{_tail(log)}")
    for _ in range(20):
        s = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State"], capture_output=True,
                           text=True, env=env, check=False)  # fmt: skip
        state = s.stdout.strip().split()[0] if s.stdout.strip() else ""
        if state and state not in ("RUNNING", "PENDING", "COMPLETING"):
            return state
        time.sleep(0.5)
    return "UNKNOWN"


def _tail(log: Path, n: int = 4000) -> str:
    return log.read_text(errors="replace")[-n:] if log.exists() else "(no log)"


def test_train_convert_eval_and_cooldown_on_slurm(
    slurm_cluster: Any, demo_data: DemoData, tmp_path: Path
) -> None:
    logs = tmp_path / "logs"
    run = logs / "exp"
    base = demo_params(logs, demo_data.prefix, demo_data.tokenizer)

    # 1. pretrain: checkpoints at 20 and 40, "after training is done" after the last save.
    train_log = run / "slurm_train.out"
    job = submit(slurm_cluster, render(TRAIN, base, tmp_path / "train.sbatch"), train_log)
    assert wait_done(slurm_cluster, job, train_log) == "COMPLETED", _tail(train_log)
    text = train_log.read_text()
    assert "after training is done" in text
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "40"
    assert sorted(p.name for p in (run / "checkpoints").glob("iter_*")) == ["iter_0000020", "iter_0000040"]

    # 2. convert + evaluate every checkpoint (the seed's loop: no CKPT_ITER).
    conv = demo_params(logs, demo_data.prefix, demo_data.tokenizer, name="exp_PRETRAIN_CONVERT_EVAL",
                       output_file=str(run / "slurm_convert.out"))  # fmt: skip
    conv_script = render(CONVERT, conv, tmp_path / "convert.sbatch")
    job = submit(slurm_cluster, conv_script, run / "slurm_convert.out")
    assert wait_done(slurm_cluster, job, run / "slurm_convert.out") == "COMPLETED", _tail(
        run / "slurm_convert.out"
    )
    ppl = {}
    for it in (20, 40):
        assert (run / "converted_checkpoints" / f"iter_{it}.done").exists()
        assert (run / "converted_hf" / f"iter_{it}" / "model.safetensors").exists()
        results = json.loads((run / "eval_results" / f"iter_{it}" / "results.json").read_text())["results"]
        ppl[it] = results["autoexp_ppl"]["word_perplexity,none"]
    assert ppl[40] < ppl[20], ppl
    assert not list((run / "in_progress_checkpoints").glob("*.lock"))

    # One job per checkpoint (CKPT_ITER): an already converted iteration is a no-op success.
    job = submit(slurm_cluster, conv_script, run / "slurm_convert.out", {"CKPT_ITER": "40"})
    assert wait_done(slurm_cluster, job, run / "slurm_convert.out") == "COMPLETED"
    assert "iter 40 already converted and evaluated" in (run / "slurm_convert.out").read_text()

    # 3. cooldown branch from iteration 20: helper, then the train template with PHASE=COOLDOWN.
    cooldown_helper = Path(base["AUTOEXP_INCLUDE"]) / "helpers" / "cooldown_helper.sh"
    helper = subprocess.run(
        ["bash", str(cooldown_helper), str(logs), "exp", "20", "S"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert helper.stdout.strip() == "1"
    cd_run = run / "cooldown_sS"
    cd = demo_params(
        logs, demo_data.prefix, demo_data.tokenizer, name="exp_COOLDOWNS_TRAIN", PHASE="COOLDOWN",
        RUN_DIR=str(cd_run), output_file=str(cd_run / "slurm_train.out"), TRAIN_ITERS=30, LR_DECAY_ITERS=30,
        LR_WSD_DECAY_ITERS=6, LOG_INTERVAL=1, SAVE_INTERVAL=10,
    )  # fmt: skip
    cd_log = cd_run / "slurm_train.out"
    job = submit(slurm_cluster, render(TRAIN, cd, tmp_path / "cooldown.sbatch"), cd_log)
    assert wait_done(slurm_cluster, job, cd_log) == "COMPLETED", _tail(cd_log)
    iters = re.findall(r"iteration\s+(\d+)/\s+30 \|.*?learning rate: ([0-9.E+-]+)", cd_log.read_text())
    assert int(iters[0][0]) == 21, iters[:3]
    assert int(iters[-1][0]) == 30
    assert float(iters[-1][1]) == pytest.approx(1e-4)  # min-lr at the last iteration
    assert float(iters[0][1]) == pytest.approx(3e-3)  # constant LR before the WSD decay
    assert (cd_run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "30"
    assert (cd_run / "checkpoints" / "iter_0000020").is_symlink()


@pytest.mark.parametrize(
    ("setting", "value", "line"),
    [
        ("MODULES", "gcc", "[autoexp] MODULES is set (gcc) but this node has no 'module' command"),
        ("JOB_ENV", "OK=1 not-a-name=2", "[autoexp] JOB_ENV word 'not-a-name=2' is not NAME=VALUE"),
    ],
)
def test_site_settings_reach_the_job_and_a_bad_one_stops_it_at_once(
    slurm_cluster: Any, tmp_path: Path, setting: str, value: str, line: str
) -> None:
    """The YAML's MODULES and JOB_ENV are applied inside the job (this node has no `module` command):
    a bad value ends the job before any work, its log naming the setting."""
    logs = tmp_path / "logs"
    log = logs / "exp" / "slurm_convert.out"
    params = demo_params(logs, tmp_path / "data", tmp_path / "tok", output_file=str(log), **{setting: value})
    job = submit(slurm_cluster, render(CONVERT, params, tmp_path / "convert.sbatch"), log)
    assert wait_done(slurm_cluster, job, log, deadline_s=120) == "FAILED", _tail(log)
    assert line in log.read_text(), _tail(log)
    assert not (logs / "exp" / "converted_hf").exists()  # stopped before any work
