"""Converter exactness: Megatron logits == HF logits (<= 1e-4, fp32) for every family, both formats."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from autoexp_cluster.convert import ConversionError, convert

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
