"""Converter exactness: Megatron logits == HF logits (fp32 <= 1e-4, bf16 within its tolerance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from autoexp_cluster.convert import ConversionError, convert
from autoexp_cluster.export_check import tolerance_for

from tests.autoexp_cluster.conftest import ROPE_RMS_SWIGLU, max_logit_error, megatron_checkpoint

pytestmark = pytest.mark.ml

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


@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
@pytest.mark.parametrize(("extra", "family"), [pytest.param(e, f, id=i) for i, e, f in VARIANTS])
def test_converted_logits_match_megatron(
    extra: list[str], family: str, fmt: str, megatron_runtime: Any, tmp_path: Path
) -> None:
    model = megatron_checkpoint(extra, fmt, tmp_path / "ckpt")
    assert convert(tmp_path / "ckpt", tmp_path / "hf") == family
    assert max_logit_error(model, tmp_path / "hf") <= 1e-4
    assert not (tmp_path / "hf.tmp").exists()


@pytest.mark.parametrize(("extra", "family"), [pytest.param(e, f, id=i) for i, e, f in VARIANTS])
def test_bf16_checkpoints_convert_within_the_bf16_tolerance(
    extra: list[str], family: str, megatron_runtime: Any, tmp_path: Path
) -> None:
    # Megatron-LM's --bf16 runs store bf16 weights; the export keeps them bit for bit in bf16.
    from safetensors import safe_open

    model = megatron_checkpoint(extra, "torch_dist", tmp_path / "ckpt", "bfloat16")
    assert convert(tmp_path / "ckpt", tmp_path / "hf") == family
    with safe_open(str(tmp_path / "hf" / "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118 (safe_open is no dict) == {torch.bfloat16}
    check = json.loads((tmp_path / "hf" / "config.json").read_text())["autoexp"]["logit_check"]
    assert check["dtype"] == "bfloat16"
    assert check["passed"] is True
    assert max_logit_error(model, tmp_path / "hf") <= tolerance_for(torch.bfloat16, check["max_abs_logit"])


def test_unsupported_combination_is_refused(megatron_runtime: Any, tmp_path: Path) -> None:
    # LayerNorm + SwiGLU: no stock class computes it, so nothing may be written.
    megatron_checkpoint(["--position-embedding-type", "rope", "--swiglu"], "torch", tmp_path / "ckpt")
    with pytest.raises(
        ConversionError, match=r"iter_0000001.*no exact HF architecture for .*normalization=LayerNorm"
    ):
        convert(tmp_path / "ckpt" / "iter_0000001", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_half_written_checkpoint_is_a_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "iter_0000005" / "mp_rank_00").mkdir(parents=True)
    (tmp_path / "iter_0000005" / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"\x80\x02truncated")
    with pytest.raises(ConversionError, match=r"iter_0000005/mp_rank_00/model_optim_rng.pt: unreadable"):
        convert(tmp_path / "iter_0000005", tmp_path / "hf")
