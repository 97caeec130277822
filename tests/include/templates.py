"""Render the AutoExperiment-format sbatch templates with demo values (shared by the template tests)."""

from __future__ import annotations

import string
import sys
from pathlib import Path
from typing import Any

from autoexp.config.builtins import SITE_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "include"
TRAIN = INCLUDE / "sbatch" / "train_container_simple.sh"
CONVERT = INCLUDE / "sbatch" / "convert_eval_checkpoint.sh"


def template_variables(path: Path) -> set[str]:
    """Every ``{NAME}`` the template formats (AutoExperiment renders with str.format over the file)."""
    return {field for _, field, _, _ in string.Formatter().parse(path.read_text()) if field}


def demo_params(logs: Path, data_prefix: Path, tokenizer: Path, **overrides: Any) -> dict[str, Any]:
    """A CPU-demo job's variables (the config's cluster-settings block plus the seed's names)."""
    params: dict[str, Any] = {
        "name": "exp_PRETRAIN_TRAIN", "output_file": str(logs / "exp" / "slurm_train.out"),
        "ACCOUNT": "projectnucleus", "PARTITION": "booster", "NODES": 1, "TIME": 15,
        "GPUS_PER_NODE": 0, "CPUS_PER_TASK": 1, "CONTAINER_RUNTIME": "none", "CONTAINER_IMAGE": "",
        "PYTHON": sys.executable, "AUTOEXP_INCLUDE": str(INCLUDE),
        "TRAIN_SCRIPT": str(INCLUDE / "autoexp_cluster" / "pretrain_gpt.py"),
        "EVAL_TASKS": "autoexp-tiny", "EVAL_TASKS_PATH": str(INCLUDE / "autoexp_cluster" / "eval_tasks"),
        "LOGS": str(logs), "RUN_DIR": str(logs / "exp"), "PHASE": "PRETRAIN",
        "DATA_PATH": str(data_prefix), "TOKENIZER_MODEL": str(tokenizer),
        "TOKENIZER_TYPE": "HuggingFaceTokenizer", "DATA_NUM_WORKERS": 0,
        "NUM_LAYERS": 2, "HIDDEN_SIZE": 64, "NUM_ATTN_HEADS": 4, "FFN_HIDDEN_SIZE": 128,
        "SEQ_LENGTH": 64, "MAX_POSITION_EMBEDDINGS": 64, "TP": 1, "PP": 1, "MICRO_BATCH_SIZE": 8,
        "GLOBAL_BATCH_SIZE": 8, "TRAIN_ITERS": 40, "WD": 0.01, "BETA1": 0.9, "BETA2": 0.95, "CLIP_GRAD": 1.0,
        "LR": 0.003, "MIN_LR": 0.0001, "LR_DECAY_STYLE": "WSD", "LR_WSD_DECAY_STYLE": "linear",
        "LR_WARMUP_ITERS": 3, "LR_DECAY_ITERS": 37, "LR_WSD_DECAY_ITERS": 0, "DISABLE_BIAS_LINEAR": "",
        "LOG_INTERVAL": 5, "SAVE_INTERVAL": 20, "EVAL_ITERS": 1,
        "SOURCE_CHECKPOINT_PATH": str(logs / "exp" / "checkpoints"),
        "TARGET_HF_PATH": str(logs / "exp" / "converted_hf"), "HF_HOME": str(logs / "hf_home"),
    }  # fmt: skip
    params.update({k: v for k, (v, _) in SITE_DEFAULTS.items()})  # the built-ins every config has
    params.update(CONVERT_GPUS_PER_NODE=0, CONVERT_CPUS_PER_TASK=1)  # as config/demo.yaml: no GPU here
    params.update(overrides)
    return params


def render(template: Path, params: dict[str, Any], dest: Path) -> Path:
    """AutoExperiment's rendering: ``open(template).read().format(**params)``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(template.read_text().format(**params))
    return dest
