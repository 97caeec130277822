"""Check an export: the written HF model's logits against megatron-core's forward pass, one fixed batch."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from autoexp_cluster.hf_mapping import Arch

# Allowed max |HF - Megatron| logit difference, relative to the largest |Megatron logit| (at least 1).
# Both models compute in the checkpoint's dtype, as an evaluator loading the export would; a wrong
# mapping (a permuted or misplaced weight, a wrong norm/rope/activation setting) moves logits by a
# sizeable fraction of their scale, far above either bound. Figures: docs/cluster-tools.md.
RELATIVE_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-3}
BATCH, SEQ_LEN, SEED = 2, 16, 0


class ExportMismatchError(Exception):
    """The exported model does not compute what the checkpoint computes; ``str()`` is one line."""


@dataclass(frozen=True)
class LogitCheck:
    """Outcome of one export check (recorded under ``autoexp.logit_check`` in the export's config.json)."""

    max_abs_diff: float
    tolerance: float
    max_abs_logit: float
    dtype: str
    tokens: list[int]  # batch shape [BATCH, seq_len]
    device: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def tolerance_for(dtype: torch.dtype, max_abs_logit: float) -> float:
    """The allowed max |Δ| for a checkpoint of ``dtype`` whose reference logits reach ``max_abs_logit``."""
    return RELATIVE_TOLERANCE[dtype] * max(1.0, max_abs_logit)


def fixed_tokens(vocab: int, max_positions: int) -> torch.Tensor:
    """The check's batch: ``BATCH x min(SEQ_LEN, max_positions)`` token ids, the same on every run."""
    return torch.randint(
        0, vocab, (BATCH, min(SEQ_LEN, max_positions)), generator=torch.Generator().manual_seed(SEED)
    )


def megatron_runtime() -> None:
    """A single-process gloo group and megatron parallel state, unless the process already has them."""
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker, model_parallel_cuda_manual_seed

    from autoexp_cluster.cpu_shim import apply_cpu_shim

    if not dist.is_initialized():
        # A private store: no TCP port, so concurrent conversions on one node never collide.
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # type: ignore[attr-defined]
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    if not torch.cuda.is_available():
        apply_cpu_shim()
    if not get_cuda_rng_tracker().get_states():
        # DotProductAttention forks the model-parallel RNG even without dropout.
        model_parallel_cuda_manual_seed(1234)


def megatron_reference(a: Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype) -> Any:
    """megatron-core's GPTModel (local spec) holding the checkpoint's tensors, in ``dtype``, eval mode."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    from autoexp_cluster.model import UNFUSED, gpt_model

    megatron_runtime()
    config = TransformerConfig(
        num_layers=a.num_layers, hidden_size=a.hidden, num_attention_heads=a.heads,
        num_query_groups=a.groups, kv_channels=a.head_dim, ffn_hidden_size=a.ffn,
        hidden_dropout=0.0, attention_dropout=0.0, normalization=a.norm, layernorm_epsilon=a.eps,
        gated_linear_unit=a.swiglu,
        activation_func=torch.nn.functional.silu if a.swiglu else torch.nn.functional.gelu,
        add_bias_linear=a.bias, add_qkv_bias=a.qkv_bias, qk_layernorm=a.qk_layernorm,
        params_dtype=dtype, bf16=dtype == torch.bfloat16, fp16=dtype == torch.float16,
        # The weights are overwritten: skip the random init (the cost of a large model).
        use_cpu_initialization=True, perform_initialization=False, **UNFUSED,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        model = gpt_model(config, a.vocab, a.max_pos, a.position, a.rotary_percent, a.rotary_base, a.tied)
    result = model.load_state_dict(tensors, strict=False)
    missing = [k for k in result.missing_keys if not k.endswith("_extra_state")]
    if missing:
        raise KeyError(", ".join(missing[:3]))
    # Norms are built in float32 whatever params_dtype says; Megatron-LM's Float16Module casts all.
    return model.to(dtype).eval()


def check_export(
    hf_dir: Path, a: Arch, tensors: dict[str, torch.Tensor], dtype: torch.dtype, remote_code: bool
) -> LogitCheck:
    """Logits of the HF model in ``hf_dir`` vs megatron-core's on the checkpoint's tensors.

    ``remote_code``: the export carries the converter's own modeling file (family ``autoexp_llama``).

    Raises ``KeyError`` when the checkpoint lacks a tensor the Megatron model needs.
    """
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from autoexp_cluster.model import causal_mask

    # A progress bar in a job log is noise between the converter's own lines.
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    t0 = time.perf_counter()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tokens = fixed_tokens(a.vocab, a.max_pos).to(device)
    batch, seq = tokens.shape
    with torch.no_grad():
        megatron = megatron_reference(a, tensors, dtype).to(device)
        positions = torch.arange(seq, device=device).expand(batch, seq)
        expected = megatron(tokens, positions, causal_mask(seq, device)).float()
        del megatron
        # Loaded from disk as an evaluator would: config.json and the safetensors are what is checked.
        hf: Any = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype, trust_remote_code=remote_code)
        got = hf.to(device).eval()(tokens).logits.float()
    if got.shape != expected.shape:
        raise ExportMismatchError(
            f"HF logits have shape {tuple(got.shape)}, Megatron's {tuple(expected.shape)}"
        )
    max_logit = float(expected.abs().max())
    return LogitCheck(
        max_abs_diff=float((got - expected).abs().max()),
        tolerance=tolerance_for(dtype, max_logit),
        max_abs_logit=max_logit,
        dtype=str(dtype).removeprefix("torch."),
        tokens=[batch, seq],
        device=device.type,
        seconds=round(time.perf_counter() - t0, 3),
    )
