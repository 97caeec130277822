"""The worked example of the AutoExperiment notes (§1.8): names, order, values, types and rendering."""

from __future__ import annotations

import pytest

from autoexp.config import Job, expand, load_config, render
from autoexp.config.builtins import builtin_values
from tests.autoexp.config.conftest import DATA

EXPECTED_NAMES = [
    "small_lr0.001_PRETRAIN",
    "small_lr0.001_COOLDOWNc10",
    "small_lr0.001_COOLDOWNc20",
    "small_lr0.003_PRETRAIN",
    "small_lr0.003_COOLDOWNc10",
    "small_lr0.003_COOLDOWNc20",
    "large_lr0.001_PRETRAIN",
    "large_lr0.001_COOLDOWNc10",
    "large_lr0.001_COOLDOWNc20",
    "large_lr0.003_PRETRAIN",
    "large_lr0.003_COOLDOWNc10",
    "large_lr0.003_COOLDOWNc20",
]


@pytest.fixture(scope="module")
def jobs() -> list[Job]:
    return expand(load_config(DATA / "worked" / "config.yaml"))


def test_names_in_autoexperiment_order(jobs: list[Job]) -> None:
    assert [j.name for j in jobs] == EXPECTED_NAMES


def test_cooldown_params_exactly(jobs: list[Job]) -> None:
    job = jobs[4]
    assert job.name == "small_lr0.003_COOLDOWNc10"
    # Every variable, in AutoExperiment's insertion order, with label pollution included; autoexp's
    # built-ins (docs/cluster-tools.md) come before the file's first key.
    builtins = list(builtin_values(job.config_path))
    assert list(job.params)[: len(builtins)] == builtins
    assert list(job.params.items())[len(builtins) :] == [
        ("cmd", "sbatch sbatch/small_lr0.003_COOLDOWNc10.sbatch"),
        ("check_interval_secs", 60),
        ("template", "ex/t.sbatch"),
        ("LOGS", "/tmp/logs"),
        ("MODEL_SIZE", "S"),
        ("S", "HIDDEN"),
        ("MODEL", "small"),
        ("HIDDEN", 128),
        ("LR", 0.003),
        ("MBS", 8),
        ("GBS", 64),
        ("NODES", 2),
        ("WD", 0.03333333333333333),
        ("PHASE", "COOLDOWN"),
        ("COOLDOWN", "PHASE_TAG"),
        ("ITERS", 100),
        ("BASE_ITERS", 1000),
        ("CD", "c10"),
        ("c10", "FRAC"),
        ("FRAC", 0.1),
        ("PHASE_TAG", "c10"),
        ("EXP", "small_lr0.003"),
        ("name", "small_lr0.003_COOLDOWNc10"),
        ("output_file", "/tmp/logs/small_lr0.003/COOLDOWNc10.out"),
        ("sbatch_script", "sbatch/small_lr0.003_COOLDOWNc10.sbatch"),
    ]
    assert type(job.params["GBS"]) is int
    assert type(job.params["WD"]) is float
    assert type(job.params["LR"]) is float


def test_pretrain_jobs_lack_cooldown_keys(jobs: list[Job]) -> None:
    pretrain = jobs[0]
    assert pretrain.params["ITERS"] == 1000
    assert pretrain.params["PHASE_TAG"] == ""
    for key in ("CD", "FRAC", "BASE_ITERS"):
        assert key not in pretrain.params


def test_job_fields(jobs: list[Job]) -> None:
    job = jobs[4]
    assert job.cmd == "sbatch sbatch/small_lr0.003_COOLDOWNc10.sbatch"
    assert job.sbatch_script == "sbatch/small_lr0.003_COOLDOWNc10.sbatch"
    assert job.output_file == "/tmp/logs/small_lr0.003/COOLDOWNc10.out"
    assert job.check_interval_secs == 60
    assert job.termination_cmd == job.termination_str == job.start_condition_cmd == ""
    assert job.template == (DATA / "worked" / "ex" / "t.sbatch").resolve()


def test_origins_name_file_and_line(jobs: list[Job]) -> None:
    job = jobs[4]
    assert job.origin("LR").endswith("config.yaml:8")
    assert job.origin("S").endswith("config.yaml:6")  # a label's value comes from its key's line
    assert job.origin("FRAC").endswith("config.yaml:19")
    with pytest.raises(KeyError):
        job.origin("NOPE")


def test_render_matches_autoexperiment(jobs: list[Job]) -> None:
    text = render(jobs[3])
    assert text == (
        "#!/bin/bash\n#SBATCH --job-name=small_lr0.003_PRETRAIN\n"
        "echo small 0.003 64 0.03333333333333333 PRETRAIN ${HOME}\n"
    )
