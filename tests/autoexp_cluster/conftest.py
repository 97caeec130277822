"""Shared fixtures for the cluster-side tools: one megatron runtime, one demo dataset, one trained run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
INCLUDE = REPO / "include"

# Seed template's architecture flags (rope + RMSNorm + SwiGLU + qk-layernorm, with bias).
SEED_ARCH = [
    "--qk-layernorm", "--position-embedding-type", "rope", "--rotary-base", "100000",
    "--rotary-percent", "1.0", "--normalization", "RMSNorm", "--swiglu",
]  # fmt: skip

# Shape of the converter's test models (tiny, exact comparisons in fp32).
BASE = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "96",
    "--seq-length", "16", "--max-position-embeddings", "32", "--micro-batch-size", "1", "--train-iters", "1",
    "--lr", "1e-3", "--data-path", "unused", "--tokenizer-model", "", "--hidden-dropout", "0",
    "--attention-dropout", "0",
]  # fmt: skip
ROPE_RMS_SWIGLU = ["--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu"]


def megatron_checkpoint(extra: list[str], fmt: str, save: Path, dtype: str = "float32") -> Any:
    """Save a perturbed model in ``fmt`` to ``save`` (iteration 1); return the model (eval mode).

    ``dtype="bfloat16"`` stores bf16 weights, as Megatron-LM's ``--bf16`` runs do.
    """
    import torch
    from autoexp_cluster.checkpointing import save_checkpoint
    from autoexp_cluster.megatron_args import parse_args
    from autoexp_cluster.model import build_model
    from autoexp_cluster.optimizer import build_optimizer, build_scheduler
    from autoexp_cluster.runtime import seed_everything

    args = parse_args([*BASE, *extra])
    args.padded_vocab_size = 128
    seed_everything(7)
    model = build_model(args, args.padded_vocab_size)
    with torch.no_grad():
        # Norm weights start at 1 and biases at 0: perturb everything so every mapping is exercised.
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    model.to(getattr(torch, dtype))
    opt = build_optimizer(model, args)
    save_checkpoint(save, 1, model, opt, build_scheduler(opt, args), args, fmt)
    return model.eval()


def max_logit_error(model: Any, hf_dir: Path) -> float:
    """Max |Megatron logits - HF logits| on fixed random tokens (batch 2 x 16, in the model's dtype)."""
    import torch
    from autoexp_cluster.model import causal_mask
    from transformers import AutoModelForCausalLM

    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(16).expand(2, 16)
    with torch.no_grad():
        expected = model(tokens, positions, causal_mask(16, torch.device("cpu")))
        dtype = next(model.parameters()).dtype
        hf = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype, trust_remote_code=True).eval()
        got = hf(tokens).logits
    assert got.shape == expected.shape
    return float((got.float() - expected.float()).abs().max().item())


def tiny_argv(data: DemoData, run_dir: Path | None, *extra: str, train_iters: int = 12) -> list[str]:
    """Megatron args for an L2 h64 model on the demo data (tiny: every test stays fast)."""
    argv = [
        "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "128",
        "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "2",
        "--global-batch-size", "4", "--train-iters", str(train_iters), "--lr", "3e-3", "--min-lr", "1e-4",
        "--lr-warmup-iters", "2", "--weight-decay", "0.01", "--adam-beta2", "0.95", "--clip-grad", "1.0",
        "--data-path", str(data.prefix), "--tokenizer-type", "HuggingFaceTokenizer",
        "--tokenizer-model", str(data.tokenizer), "--split", "90,9,1", "--log-interval", "1",
        "--eval-interval", "1000", "--eval-iters", "1", "--seed", "1234",
    ]  # fmt: skip
    if run_dir is not None:
        argv += [
            "--save",
            str(run_dir),
            "--load",
            str(run_dir),
            "--data-cache-path",
            str(run_dir.parent / "cache"),
        ]
    return argv + list(extra)


@dataclass(frozen=True)
class DemoData:
    """A prepared demo dataset."""

    root: Path
    prefix: Path
    tokenizer: Path


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> DemoData:
    from autoexp_cluster.corpus import documents
    from autoexp_cluster.prepare_data import prepare

    root = tmp_path_factory.mktemp("demo_data")
    prefix = prepare(root, list(documents(600, seed=0)), vocab_size=320)
    return DemoData(root=root, prefix=prefix, tokenizer=root / "tokenizer")


@pytest.fixture(scope="session")
def megatron_runtime() -> Any:
    """gloo + megatron parallel state (+ CPU shim) for in-process models, once per session."""
    from autoexp_cluster.megatron_args import parse_args
    from autoexp_cluster.runtime import init_runtime

    args = parse_args(["--num-layers", "1", "--hidden-size", "8", "--num-attention-heads", "1",
                       "--seq-length", "8", "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1",
                       "--data-path", "x", "--tokenizer-model", "x"])  # fmt: skip
    return init_runtime(args)


def run_trainer_cli(argv: Sequence[str], log: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python include/autoexp_cluster/pretrain_gpt.py ...`` the way the template runs it."""
    env = {**os.environ, "PYTHONPATH": str(INCLUDE), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, str(INCLUDE / "autoexp_cluster" / "pretrain_gpt.py"), *argv],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )  # fmt: skip
    log.write_text(proc.stdout + proc.stderr)
    return proc


@dataclass(frozen=True)
class TrainedRun:
    """A CLI training run with checkpoints at 15 and 60 (legacy format) and its log."""

    checkpoints: Path
    log: str


@pytest.fixture(scope="session")
def trained_run(demo_data: DemoData, tmp_path_factory: pytest.TempPathFactory) -> TrainedRun:
    run = tmp_path_factory.mktemp("trained") / "checkpoints"
    argv = tiny_argv(
        demo_data, run, *SEED_ARCH, "--ckpt-format", "torch", "--save-interval", "15",
        "--log-interval", "15", "--eval-interval", "60", "--use-flash-attn", "--bf16",
        "--lr-decay-style", "WSD", "--lr-wsd-decay-style", "linear", "--lr-wsd-decay-iters", "10",
        "--micro-batch-size", "8", "--global-batch-size", "16",
        "--hidden-dropout", "0", "--attention-dropout", "0",
        train_iters=60,
    )  # fmt: skip
    proc = run_trainer_cli(argv, run.parent / "train.log")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return TrainedRun(checkpoints=run, log=proc.stdout + proc.stderr)
