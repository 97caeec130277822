"""Megatron rope + RMSNorm + SwiGLU + qk-layernorm + bias as a HF causal LM (trust_remote_code)."""

from __future__ import annotations

from transformers.models.llama.modeling_llama import LlamaMLP
from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

from .configuration_autoexp_llama import AutoexpLlamaConfig


class AutoexpLlamaForCausalLM(Qwen3ForCausalLM):  # type: ignore[no-untyped-call]
    """Qwen3 (attention bias from ``attention_bias``, per-head q/k RMSNorm) with a bias-capable MLP.

    Qwen3's MLP never has a bias; Megatron's ``--qk-layernorm`` runs without ``--disable-bias-linear``
    do, so the MLP is Llama's, which honours ``mlp_bias``.
    """

    config_class = AutoexpLlamaConfig

    def __init__(self, config: AutoexpLlamaConfig) -> None:
        super().__init__(config)
        for layer in self.model.layers:
            layer.mlp = LlamaMLP(config)  # type: ignore[no-untyped-call]
        self.post_init()  # type: ignore[no-untyped-call]
