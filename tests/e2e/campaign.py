"""Shared set-up of the end-to-end tests: reduced demo configs and an Airflow stack that runs them."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import urllib.error
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning import dag_plan
from tests.fixtures.airflow_stack import AirflowStack
from tests.fixtures.airflow_stack import start_stack as fixture_stack
from tests.support.checkout import DEMO_DIR_ENV

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "config" / "demo.yaml"
DAG_ID = "demo_demo_tiny_lr0.003_bs4"


# The shape of the first demo (2 sizes x 2 LRs, pretraining saving 3 checkpoints, 2 cooldowns branched
# at 20 and 40), whatever the shipped demo's grid and budgets are: each key's line of config/demo.yaml
# (comment included) -> this one; None removes the line. The reduced demo keeps one size and LR of it.
FIRST_DEMO_LINES: dict[str, str | None] = {
    "LR": "LR: [3e-3, 1e-2]",
    "TOTAL_TOKENS_NUM": "TOTAL_TOKENS_NUM: 15360",
    "SAVE_INTERVAL": "SAVE_INTERVAL: 20",
    "  share_conversion_jobs": None,  # one conversion job per checkpoint, named by its iteration
}
FIRST_DEMO_BUDGETS = (
    "        - 8K: {TOTAL_TOKENS_THIS_PHASE: 8192}\n        - 12K: {TOTAL_TOKENS_THIS_PHASE: 12288}\n"
)


def _demo_text(models: int, lines: dict[str, str | None], budgets: str) -> str:
    """config/demo.yaml with its first ``models`` models, ``lines`` and the cooldown ``budgets`` (the
    CD_SCALE list); its tools stay this checkout's wherever the copy lives."""
    text = DEMO.read_text()
    cut = [m.start() for m in re.finditer(r"^  - \w+:\n      NUM_LAYERS:", text, flags=re.M)]
    assert len(cut) > models, cut
    text = text[: cut[models]] + text[text.index("SEQ_LENGTH:") :]
    for key, line in lines.items():
        text, found = re.subn(rf"^{key}:.*\n", "" if line is None else line + "\n", text, flags=re.M)
        assert found == 1, key
    found_budgets = re.search(r"^      CD_SCALE:\n((?:        - .*\n)+)", text, flags=re.M)
    assert found_budgets is not None, "CD_SCALE"
    text = text[: found_budgets.start(1)] + budgets + text[found_budgets.end(1) :]
    old = 'AUTOEXP_CHECKOUT: "{CONFIG_DIR}/.."'
    assert old in text, old
    return text.replace(old, f'AUTOEXP_CHECKOUT: "{REPO}"')


def first_demo_config(folder: Path) -> Path:
    """``folder/demo.yaml`` (the campaign keeps the name demo): the first demo's 4 experiments (tiny
    and small x LR 3e-3 and 1e-2), pretraining 60 iterations saving at 20, 40, 60, cooldown_8K from 20
    and cooldown_12K from 40; a conversion job per checkpoint."""
    path = folder / "demo.yaml"
    path.write_text(_demo_text(2, FIRST_DEMO_LINES, FIRST_DEMO_BUDGETS))
    return path


def reduced_config(folder: Path, *replacements: tuple[str, str]) -> Path:
    """The first demo with one model (tiny), one LR (3e-3) and one cooldown budget (cooldown_8K, 32
    iterations branched from iteration 20); 40 pretrain iterations (saves at 20, 40); a conversion job
    per checkpoint."""
    lines = {**FIRST_DEMO_LINES, "LR": "LR: [3e-3]", "TOTAL_TOKENS_NUM": "TOTAL_TOKENS_NUM: 10240"}
    text = _demo_text(1, lines, FIRST_DEMO_BUDGETS.splitlines(keepends=True)[0])
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = folder / "demo-reduced.yaml"
    path.write_text(text)
    return path


def job_name(
    config: Path,
    demo_dir: Path,
    phase: str = "pretrain",
    task: str = dag_plan.TRAIN_TASK,
    iteration: int | None = None,
    dag_id: str | None = None,
) -> str:
    """The Slurm job name of one task of ``config``'s DAG ``dag_id`` (default: the first): the same
    in every run of that DAG."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(DEMO_DIR_ENV, str(demo_dir))
        plans, settings = load_plans(config, ())
    plan = next(p for p in plans if dag_id in (None, p.dag_id))
    remote_dir = dag_plan.plan_dag(plan, settings).remote_dir
    return dag_plan.job_name(plan, remote_dir, phase, task, iteration)


def prepare_data(demo_dir: Path, cluster: Any, docs: int | None = 800) -> None:
    """The demo's tokenized corpus under ``demo_dir/data`` (800 documents: enough for the reduced demo;
    ``docs=None``: prepare_data's default, as scripts/demo makes it)."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "autoexp_cluster.prepare_data",
            "--output",
            str(demo_dir / "data"),
            *(() if docs is None else ("--docs", str(docs))),
        ],
        check=True,
        env={**cluster.env(), "PYTHONPATH": str(REPO / "include")},
        timeout=300,
    )


def start_stack(
    airflow_stack_factory: Any, config: Path, demo_dir: Path, replicas: Mapping[str, int] | None = None
) -> Any:
    """A real Airflow (LocalExecutor, PostgreSQL) that parses only ``config``, with the Slurm pool created."""
    # The config resolves its paths from its own folder; only the campaign folder moves into tmp_path.
    stack = airflow_stack_factory(
        REPO / "dags", replicas, AUTOEXP_CONFIGS=str(config), AUTOEXP_DEMO_DIR=str(demo_dir)
    )
    create_pool(stack)
    return stack


def start_module_stack(home: Path, config: Path, demo_dir: Path, **extra_env: str) -> AirflowStack:
    """``start_stack`` for a module fixture (one stack shared by a module's tests); the caller stops it."""
    env = {"AUTOEXP_CONFIGS": str(config), "AUTOEXP_DEMO_DIR": str(demo_dir), **extra_env}
    stack = fixture_stack(home, REPO / "dags", env)
    try:
        create_pool(stack)
    except BaseException:
        stack.stop()
        raise
    return stack


def create_pool(stack: AirflowStack) -> None:
    """The config's pool, deferred tasks included (as docs/dag-factory.md tells users to).

    Through the REST API, what `airflow pools set slurm_local 4 local --include-deferred` writes: the
    CLI is a Python process of its own that imports Airflow (~5 CPU-s per stack on 2 cores); the
    command itself is checked in scripts/demo and the compose files (tests/docker/test_compose.py).
    """
    pool = {"name": "slurm_local", "slots": 4, "description": "local", "include_deferred": True}
    try:
        stack.api("POST", "pools", pool)
    except TimeoutError:  # a POST is sent once: it may have been written all the same, or not
        with contextlib.suppress(urllib.error.HTTPError):  # 409: the first one was
            stack.api("POST", "pools", pool)
    created = stack.api("GET", "pools/slurm_local")
    assert {k: created[k] for k in pool} == pool, created


def sacct_names(cluster: Any, pattern: str) -> list[str]:
    """``JobID|JobName|State`` of the jobs of the last hour whose line contains ``pattern``."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-o", "JobID,JobName,State", "-S", "now-1hour"],
        capture_output=True,
        text=True,
        check=True,
        env=cluster.env(),
        timeout=60,
    ).stdout
    return [line for line in out.splitlines() if pattern in line]


def demo_job_names(config: Path, demo_dir: Path) -> list[str]:
    """Every Slurm job name of the reduced demo: trainings and conversions of both phases."""
    convert = dag_plan.CONVERT_TASK
    return [
        job_name(config, demo_dir, "pretrain"),
        job_name(config, demo_dir, "pretrain", convert, 20),
        job_name(config, demo_dir, "pretrain", convert, 40),
        job_name(config, demo_dir, "cooldown_8K"),
        job_name(config, demo_dir, "cooldown_8K", convert, 32),
    ]
