"""Config for Llama + per-head q/k RMSNorm + optional linear biases (Megatron --qk-layernorm with bias)."""

from __future__ import annotations

from typing import Any

from transformers.models.qwen3.configuration_qwen3 import Qwen3Config


class AutoexpLlamaConfig(Qwen3Config):  # type: ignore[no-untyped-call]
    """Qwen3's attention (q/k norm before RoPE) with Llama's MLP, whose bias follows ``mlp_bias``."""

    model_type = "autoexp_llama"

    def __init__(self, mlp_bias: bool = False, qk_layernorm: bool = True, **kwargs: Any) -> None:
        self.mlp_bias = mlp_bias
        self.qk_layernorm = qk_layernorm
        super().__init__(**kwargs)
