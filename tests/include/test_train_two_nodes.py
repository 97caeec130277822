"""A NODES: 2 training through the real template's multi-node path, on a two-node local cluster.

The second node's slurmd runs in a network namespace of its own (tests/fixtures/two_node_cluster.py):
rank 1 reaches the rendezvous only through the first node's NodeAddr on the veth link, as a compute
node reaches another over the interconnect. No fake anywhere: sbatch, srun, torchrun (static
rendezvous, gloo on CPU), autoexp's trainer and the converter template all run for real.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.autoexp_cluster.conftest import DemoData
from tests.fixtures.two_node_cluster import TwoNodeCluster, two_node_cluster
from tests.include.templates import CONVERT, TRAIN, demo_params, render
from tests.include.test_resume_local import job_text, sbatch
from tests.include.test_sbatch_local import _tail, wait_done

__all__ = ["two_node_cluster"]  # the fixture, imported so that pytest finds it here

pytestmark = [pytest.mark.slurm, pytest.mark.ml, pytest.mark.slow]

# srun labels each task's lines with its task id (SLURM_LABELIO, read by srun from the job's
# environment); LOGLEVEL=INFO makes each node's torchrun agent print its rendezvous result.
JOB_ENV = "LOGLEVEL=INFO SLURM_LABELIO=1"
LOADED_6 = re.compile(
    r"^\s*0:\s+successfully loaded checkpoint from \S*iter_0000006\S* .*at iteration 6$", re.M
)
ITERATION = re.compile(r"^\s*(\d+):\s+\[[^]]+\] iteration\s+(\d+)/\s*(\d+) \|", re.MULTILINE)


def rendezvous(text: str, task: int) -> dict[str, str]:
    """The torchrun agent's "Rendezvous complete" block printed by srun task ``task``."""
    fields = re.findall(rf"^\s*{task}: I\d+ [^\]]+\]\s+(\w+)=(\S+)$", text, re.MULTILINE)
    return dict(fields)


def node_addr(cluster: Any, node: str) -> str:
    """The node's NodeAddr, as slurmctld has it."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "node", node],
        capture_output=True, text=True, env=cluster.env(), timeout=60, check=False,
    ).stdout  # fmt: skip
    found = re.search(r"\bNodeAddr=(\S+)", out)
    assert found, out
    return found.group(1)


def step_nodes(cluster: Any, job_id: str) -> tuple[str, str]:
    """(NodeList, NTasks) of the job's first srun step, from accounting."""
    out = subprocess.run(
        ["sacct", "-n", "-P", "-j", f"{job_id}.0", "-o", "NodeList,NTasks"],
        capture_output=True, text=True, env=cluster.env(), timeout=60, check=False,
    ).stdout.split()  # fmt: skip
    node_list, tasks = out[0].split("|")
    return node_list, tasks


def test_a_two_node_training_saves_resumes_and_converts(
    two_node_cluster: TwoNodeCluster, demo_data: DemoData, tmp_path: Path, figure: Any
) -> None:
    cluster = two_node_cluster.cluster
    first, second = two_node_cluster.nodes
    logs = tmp_path / "logs"
    run = logs / "exp"
    log = run / "slurm_train.out"
    # Two data-parallel ranks: the global batch is two micro-batches, one per rank.
    common = {
        "NODES": 2, "SOCKET_IFNAME": two_node_cluster.socket_ifname, "JOB_ENV": JOB_ENV,
        "MICRO_BATCH_SIZE": 4, "GLOBAL_BATCH_SIZE": 8, "LR_DECAY_ITERS": 12, "LOG_INTERVAL": 1,
        "SAVE_INTERVAL": 6,
    }  # fmt: skip
    figure(f"two-node cluster up in {two_node_cluster.start_s:.1f} s")
    started = time.monotonic()
    for train_iters in (6, 12):
        params = demo_params(logs, demo_data.prefix, demo_data.tokenizer, TRAIN_ITERS=train_iters, **common)
        job = sbatch(cluster, render(TRAIN, params, tmp_path / f"train{train_iters}.sbatch"), log)
        assert wait_done(cluster, job, log, deadline_s=420) == "COMPLETED", _tail(log)
        text = job_text(log, job)
        assert f"[autoexp] job {job} on {first},{second} started" in text
        assert step_nodes(cluster, job) == (f"{first},{second}", "2")
        # Each node's agent joined the static rendezvous at the first node's NodeAddr, with its own rank.
        ranks = [rendezvous(text, task) for task in (0, 1)]
        master = {r.get("master_addr") for r in ranks}
        assert master == {node_addr(cluster, first)}, ranks  # on the veth link, not loopback
        assert [(r.get("group_rank"), r.get("group_world_size")) for r in ranks] == [("0", "2"), ("1", "2")]
        iters = [(int(task), int(it)) for task, it, _ in ITERATION.findall(text)]
        assert {task for task, _ in iters} == {0}, iters  # Megatron prints progress on rank 0 only
        figure(f"{train_iters} iters: iterations {iters[0][1]}..{iters[-1][1]}, master {master.pop()}")
        if train_iters == 6:
            assert [it for _, it in iters] == list(range(1, 7))
        else:
            assert [it for _, it in iters] == list(range(7, 13))  # resumed after the saved iteration 6
            assert LOADED_6.search(text), _tail(log)
    assert sorted(p.name for p in (run / "checkpoints").glob("iter_*")) == ["iter_0000006", "iter_0000012"]
    assert (run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "12"

    # The checkpoint both ranks wrote converts (and is evaluated) on one node, as in a campaign.
    conv_log = run / "slurm_convert.out"
    conv = demo_params(logs, demo_data.prefix, demo_data.tokenizer, name="exp_PRETRAIN_CONVERT_EVAL",
                       output_file=str(conv_log))  # fmt: skip
    job = sbatch(
        cluster, render(CONVERT, conv, tmp_path / "convert.sbatch"), conv_log, "--export=ALL,CKPT_ITER=12"
    )
    assert wait_done(cluster, job, conv_log, deadline_s=420) == "COMPLETED", _tail(conv_log)
    assert (run / "converted_hf" / "iter_12" / "model.safetensors").exists()
    assert (run / "converted_checkpoints" / "iter_12.done").exists()
    figure(f"two-node train+resume+convert: {time.monotonic() - started:.0f} s")
