"""The DAG page and the trigger form say in plain words what an experiment is."""

from __future__ import annotations

import dataclasses

from autoexp.campaign.planning.dag_docs import amount, doc_md, phase_choices
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.plan import ExperimentPlan, plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings
from tests.autoexp.campaign.planning.jobs import campaign

SETTINGS = AirflowSettings()
MODEL = {
    "MODEL": "10M",
    "NUM_LAYERS": 2,
    "HIDDEN_SIZE": 32,
    "NUM_ATTN_HEADS": 4,
    "VOCAB_SIZE": 100,
    "LR": 0.003,
    "LR_WARMUP_ITERS": 5,
    "LR_DECAY_STYLE": "WSD",
    "MIN_LR": 0.0,
    "WD": 0.1,
    "MICRO_BATCH_SIZE": 1,
    "DATASET_NAME": "c4",
    "DATA_PATH": "/data/c4_text_document",
    "TOKENIZER_MODEL": "/data/tokenizer",
}


def _plan(**params: object) -> ExperimentPlan:
    jobs = [dataclasses.replace(j, params={**j.params, **params}) for j in campaign(exps=("a",))]
    return plan_campaign(jobs, SETTINGS)[0]


def test_amounts_read_at_a_glance() -> None:
    counts = (2_000_000_000, 100_000_000, 15360, 8192, 256, 0)
    assert " ".join(amount(n) for n in counts) == "2B 100M 15.4K 8.19K 256 0"


def test_the_page_says_what_the_experiment_is() -> None:
    plan = _plan(**MODEL)
    text = doc_md(plan_dag(plan, SETTINGS), "/cfg/c.yaml", "abc123")
    lines = text.splitlines()
    assert lines[0] == "# a"
    # 12 L H^2 + V H parameters.
    assert "- **Model**: 10M, 2 layers of width 32, 4 attention heads, about 27.8K parameters" in lines
    rate = "peak 0.003, warmup 5 iterations, WSD schedule, down to 0.0, weight decay 0.1"
    assert f"- **Learning rate**: {rate}" in lines
    # SEQ_LENGTH 8 x GLOBAL_BATCH_SIZE 2 (the fake campaign's shape).
    assert "- **Batch**: 2 sequences of 8 tokens = 16 tokens per iteration (micro-batch 1)" in lines
    assert "- **Data**: c4: `/data/c4_text_document`, tokenizer `/data/tokenizer`" in lines
    # 10 pretraining iterations, cooldowns to 12 and 16 iterations, 16 tokens each.
    assert "- **Token budget**: 160 tokens for pretraining; 192 for cooldown s1; 256 for cooldown s2" in lines
    assert "| pretraining | scratch | 10 (saves every 4) | 160 | 3: 4, 8, 10 |" in lines
    assert "| cooldown s1 | pretraining iter 4 | 12 (saves every 4) | 192 | 2: 8, 12 |" in lines
    assert "Run folder `/logs/a`, holding:" in lines
    assert "- cooldown s1 checkpoints: `cooldown_ss1/checkpoints`" in lines
    assert "- evaluation results: `eval_results`" in lines
    assert lines[-1] == "From `/cfg/c.yaml` (sha256 `abc123`): 6 Slurm jobs."
    # No internal key/label pairs: no table of raw variables.
    assert "| `LR` |" not in text
    assert "MODEL" not in text


def test_what_a_config_does_not_name_is_left_out_not_invented() -> None:
    text = doc_md(plan_dag(_plan(), SETTINGS), "/cfg/c.yaml", "abc123")
    assert "- **Model**: a GPT model" in text
    assert "- **Learning rate**: as the training script's default" in text
    assert "- **Data**: as the training script's default" in text


def test_phase_choices_name_each_phase_and_its_branch_point() -> None:
    assert phase_choices(_plan()) == {
        "pretrain": "pretraining",
        "cooldown_s1": "cooldown s1, from pretraining iter 4",
        "cooldown_s2": "cooldown s2, from pretraining iter 8",
    }
