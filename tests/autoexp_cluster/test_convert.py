"""Converter exactness: Megatron logits == HF logits (<= 1e-4, fp32) for every family, both formats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from autoexp_cluster.convert import ConversionError, convert
from autoexp_cluster.megatron_args import parse_args

pytestmark = pytest.mark.ml

BASE = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--ffn-hidden-size", "96",
    "--seq-length", "16", "--max-position-embeddings", "32", "--micro-batch-size", "1", "--train-iters", "1",
    "--lr", "1e-3", "--data-path", "unused", "--tokenizer-model", "", "--hidden-dropout", "0",
    "--attention-dropout", "0",
]  # fmt: skip
ROPE_RMS_SWIGLU = ["--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu"]

# (id, extra Megatron flags, HF family the converter must pick)
VARIANTS = [
    ("gpt2", [], "gpt2"),
    ("gpt2-nobias-untied", ["--disable-bias-linear", "--untie-embeddings-and-output-weights"], "gpt2"),
    ("neox-partial-rope", ["--position-embedding-type", "rope", "--rotary-percent", "0.5"], "gpt_neox"),
    ("neox-nobias", ["--position-embedding-type", "rope", "--disable-bias-linear"], "gpt_neox"),
    ("llama-gqa-bias-untied", [*ROPE_RMS_SWIGLU, "--group-query-attention", "--num-query-groups", "2",
                               "--untie-embeddings-and-output-weights", "--norm-epsilon", "1e-6"], "llama"),
    ("llama-nobias", [*ROPE_RMS_SWIGLU, "--disable-bias-linear", "--rotary-base", "500000"], "llama"),
    ("seed-without-bias", [*ROPE_RMS_SWIGLU, "--qk-layernorm", "--rotary-base", "100000",
                           "--disable-bias-linear"], "qwen3"),
    ("seed-with-bias", [*ROPE_RMS_SWIGLU, "--qk-layernorm", "--rotary-base", "100000"], "autoexp_llama"),
]  # fmt: skip


def _megatron_checkpoint(extra: list[str], fmt: str, save: Path) -> Any:
    from autoexp_cluster.checkpointing import save_checkpoint
    from autoexp_cluster.model import build_model
    from autoexp_cluster.trainer import build_optimizer, build_scheduler, seed_everything

    args = parse_args([*BASE, *extra])
    args.padded_vocab_size = 128
    seed_everything(7)
    model = build_model(args, args.padded_vocab_size)
    with torch.no_grad():
        # Norm weights start at 1 and biases at 0: perturb everything so every mapping is exercised.
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    opt = build_optimizer(model, args)
    save_checkpoint(save, 1, model, opt, build_scheduler(opt, args), args, fmt)
    return model.eval()


@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
@pytest.mark.parametrize(("extra", "family"), [pytest.param(e, f, id=i) for i, e, f in VARIANTS])
def test_converted_logits_match_megatron(
    extra: list[str], family: str, fmt: str, megatron_runtime: Any, tmp_path: Path
) -> None:
    from autoexp_cluster.model import causal_mask
    from transformers import AutoModelForCausalLM

    model = _megatron_checkpoint(extra, fmt, tmp_path / "ckpt")
    assert convert(tmp_path / "ckpt", tmp_path / "hf") == family

    tokens = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(16).expand(2, 16)
    with torch.no_grad():
        expected = model(tokens, positions, causal_mask(16, torch.device("cpu")))
        hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
        got = hf(tokens).logits
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= 1e-4
    assert not (tmp_path / "hf.tmp").exists()


def test_unsupported_combination_is_refused(megatron_runtime: Any, tmp_path: Path) -> None:
    # LayerNorm + SwiGLU: no stock class computes it, so nothing may be written.
    _megatron_checkpoint(["--position-embedding-type", "rope", "--swiglu"], "torch", tmp_path / "ckpt")
    with pytest.raises(
        ConversionError, match=r"iter_0000001.*no exact HF architecture for .*normalization=LayerNorm"
    ):
        convert(tmp_path / "ckpt" / "iter_0000001", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_half_written_checkpoint_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "iter_0000005" / "mp_rank_00").mkdir(parents=True)
    (tmp_path / "iter_0000005" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"\x80\x02truncated")
    with pytest.raises(ConversionError, match=r"iter_0000005: unreadable"):
        convert(tmp_path / "iter_0000005", tmp_path / "hf")
