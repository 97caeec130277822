"""config/scaling_exps.yaml: 1,080 jobs in 90 experiments with the seed's iteration counts (notes §4.6)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoexp.config import Job, expand, experiment_key, filter_jobs, load_config, render
from autoexp.config.builtins import tools_hash

SHIPPED = Path(__file__).resolve().parents[3] / "config" / "scaling_exps.yaml"

# The cluster-settings contract every shipped config defines for the templates.
CONTRACT = (
    "GPUS_PER_NODE",
    "CPUS_PER_TASK",
    "CONTAINER_RUNTIME",
    "CONTAINER_IMAGE",
    "PYTHON",
    "TRAIN_SCRIPT",
    "AUTOEXP_INCLUDE",
    "EVAL_TASKS",
    "EVAL_TASKS_PATH",
)


@pytest.fixture(scope="module")
def jobs() -> list[Job]:
    return expand(load_config(SHIPPED))


def _one(jobs: list[Job], **where: str) -> Job:
    (job,) = filter_jobs(jobs, {k: [v] for k, v in where.items()})
    return job


def test_counts(jobs: list[Job]) -> None:
    assert len(jobs) == 1080
    assert len({experiment_key(j) for j in jobs}) == 90
    per_phase_mode = {
        (p, m): len(filter_jobs(jobs, {"PHASE": [p], "MODE": [m]}))
        for p in ("PRETRAIN", "COOLDOWN")
        for m in ("TRAIN", "CONVERT_EVAL")
    }
    assert per_phase_mode == {
        ("PRETRAIN", "TRAIN"): 90,
        ("PRETRAIN", "CONVERT_EVAL"): 90,
        ("COOLDOWN", "TRAIN"): 450,
        ("COOLDOWN", "CONVERT_EVAL"): 450,
    }


def test_names_and_order(jobs: list[Job]) -> None:
    assert jobs[0].name == "c4_10M_lr0.01_b1_0.9_b2_0.95_wd0.01_w585_n1_bs4__withBias_PRETRAIN_TRAIN"
    assert jobs[1].name == "c4_10M_lr0.01_b1_0.9_b2_0.95_wd0.01_w585_n1_bs4__withBias_PRETRAIN_CONVERT_EVAL"
    assert jobs[2].name == "c4_10M_lr0.01_b1_0.9_b2_0.95_wd0.01_w585_n1_bs4__withBias_COOLDOWN100M_TRAIN"
    assert (
        jobs[-1].name
        == "c4_50M_lr0.0001_b1_0.9_b2_0.95_wd1.0_w309_n1_bs32__withoutBias_COOLDOWN2B_CONVERT_EVAL"
    )
    assert sorted({j.params["WD"] for j in jobs}) == [0.01, 0.02, 0.1, 0.2, 1.0]


@pytest.mark.parametrize(
    ("model", "mbs", "gbs", "train", "warmup", "decay"),
    [
        ("10M", "4", 16, 61036, 585, 60451),
        ("10M", "32", 128, 7630, 73, 7557),
        ("25M", "16", 64, 15259, 357, 14902),
        ("25M", "32", 128, 7630, 178, 7452),
        ("50M", "4", 16, 61036, 2475, 58561),
        ("50M", "16", 64, 15259, 618, 14641),
    ],
)
def test_pretrain_iterations(
    jobs: list[Job], model: str, mbs: str, gbs: int, train: int, warmup: int, decay: int
) -> None:
    job = _one(
        jobs, MODEL=model, MICRO_BATCH_SIZE=mbs, PHASE="PRETRAIN", MODE="TRAIN", LR="0.001", BIAS="WITH"
    )
    assert job.params["GLOBAL_BATCH_SIZE"] == gbs
    assert job.params["TRAIN_ITERS"] == train
    assert job.params["LR_WARMUP_ITERS"] == warmup
    assert job.params["LR_DECAY_ITERS"] == decay
    assert job.params["LR_WSD_DECAY_ITERS"] == 0


@pytest.mark.parametrize(
    ("scale", "mbs", "train", "wsd", "branch"),
    [
        ("100M", "4", 3052, 305, 2000),
        ("100M", "16", 763, 76, 0),
        ("200M", "32", 763, 76, 0),
        ("400M", "16", 3052, 305, 2000),
        ("1B", "4", 30518, 3051, 26000),
        ("1B", "32", 3815, 381, 2000),
        ("2B", "4", 61036, 6103, 54000),
        ("2B", "16", 15259, 1525, 12000),
    ],
)
def test_cooldown_iterations(
    jobs: list[Job], scale: str, mbs: str, train: int, wsd: int, branch: int
) -> None:
    job = _one(
        jobs, MODEL="25M", MICRO_BATCH_SIZE=mbs, CD_SCALE=scale, MODE="TRAIN", LR="0.01", BIAS="WITHOUT"
    )
    assert job.params["TRAIN_ITERS"] == train
    assert job.params["LR_WSD_DECAY_ITERS"] == wsd
    assert job.params["ITER"] == branch
    assert job.params["LR_DECAY_ITERS"] == str(train)  # the seed writes "{TRAIN_ITERS}": a string
    assert job.params["COOLDOWN_FRACTION"] == 0.1


def test_cluster_settings_contract_and_paths(jobs: list[Job]) -> None:
    job = jobs[2]
    for key in CONTRACT:
        assert key in job.params, key
    assert job.params["CONTAINER_IMAGE"] == "/p/data1/mmlaion/shared/containers/pytorch_24.09-py3.sif"
    assert job.params["TRAIN_SCRIPT"] == "/p/data1/mmlaion/shared/repos/Megatron-LM/pretrain_gpt.py"
    assert job.params["EVAL_TASKS_PATH"] == "/p/data1/mmlaion/shared/eval"
    assert job.start_condition_cmd == (
        f"/p/data1/mmlaion/porian1/megatron_ref_logs/scaling_exps/.autoexp/tools/{tools_hash()}"
        "/helpers/cooldown_helper.sh "
        "/p/data1/mmlaion/porian1/megatron_ref_logs/scaling_exps "
        "c4_10M_lr0.01_b1_0.9_b2_0.95_wd0.01_w585_n1_bs4__withBias 2000 100M"
    )
    root = SHIPPED.parents[1]
    assert {j.template for j in jobs} == {
        root / "include" / "sbatch" / "train_container_simple.sh",
        root / "include" / "sbatch" / "convert_eval_checkpoint.sh",
    }


def test_every_job_renders_with_its_job_name_line(jobs: list[Job]) -> None:
    for job in jobs[:12]:
        assert f"#SBATCH --job-name={job.name}" in render(job)


def test_conversion_jobs_ask_for_their_own_resources(jobs: list[Job]) -> None:
    """Issue 15: the seed's 1,980 conversion jobs no longer ask for the training's 4 GPUs, 48 CPUs, 6 h."""
    convert = [j for j in jobs if j.params["MODE"] == "CONVERT_EVAL"]
    assert len(convert) == 540
    for job in (convert[0], convert[-1]):
        text = render(job)
        assert "#SBATCH --gpus-per-node=1\n" in text
        assert "#SBATCH --cpus-per-task=12\n" in text
        assert "#SBATCH --time=60\n" in text
        assert "GPUS_PER_NODE=1\n" in text  # the container's --nv follows the conversion's GPUs
    train = render(next(j for j in jobs if j.params["MODE"] == "TRAIN"))
    assert "#SBATCH --gpus-per-node=4\n" in train
    assert "#SBATCH --time=360\n" in train


def test_site_settings_are_rendered_not_read_from_the_shell(jobs: list[Job]) -> None:
    train = render(next(j for j in jobs if j.params["MODE"] == "TRAIN"))
    assert 'SOCKET_IFNAME="ib0"\n' in train
    assert 'MASTER_ADDR="${NODE_ADDR:-$FIRST_NODE}i"' in train
    assert 'autoexp_site_env "" ""' in train
    for script in (train, render(jobs[1])):
        assert "AUTOEXP_SOCKET_IFNAME" not in script
        assert "AUTOEXP_MASTER_SUFFIX" not in script
        assert "AUTOEXP_CONTAINER_ARGS" not in script
        assert 'pytorch_24.09-py3.sif" "" || exit 2' in script  # CONTAINER_ARGS: the YAML's ""
