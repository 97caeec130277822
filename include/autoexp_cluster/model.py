"""Build megatron-core's GPTModel (local spec) from Megatron-LM arguments."""

from __future__ import annotations

import argparse
from typing import Any

import torch

# Fused kernels need Apex/TE; the unfused paths compute the same function.
UNFUSED = {
    "bias_activation_fusion": False,
    "masked_softmax_fusion": False,
    "bias_dropout_fusion": False,
    "apply_rope_fusion": False,
    "gradient_accumulation_fusion": False,
    "persist_layer_norm": False,
}


def transformer_config(args: argparse.Namespace) -> Any:
    """The ``TransformerConfig`` Megatron-LM would derive from these arguments."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    return TransformerConfig(
        num_layers=args.num_layers,
        hidden_size=args.hidden_size,
        num_attention_heads=args.num_attention_heads,
        num_query_groups=args.num_query_groups,
        kv_channels=args.kv_channels,
        ffn_hidden_size=args.ffn_hidden_size,
        hidden_dropout=args.hidden_dropout,
        attention_dropout=args.attention_dropout,
        init_method_std=args.init_method_std,
        normalization=args.normalization,
        layernorm_epsilon=args.layernorm_epsilon,
        layernorm_zero_centered_gamma=args.apply_layernorm_1p,
        gated_linear_unit=args.swiglu,
        activation_func=torch.nn.functional.silu if args.swiglu else torch.nn.functional.gelu,
        add_bias_linear=args.add_bias_linear,
        add_qkv_bias=args.add_qkv_bias,
        qk_layernorm=args.qk_layernorm,
        rotary_interleaved=args.rotary_interleaved,
        use_cpu_initialization=True,
        **UNFUSED,
    )


def gpt_model(
    config: Any,
    vocab_size: int,
    max_positions: int,
    position: str,
    rotary_percent: float,
    rotary_base: float,
    tied: bool,
    pre_process: bool = True,
    post_process: bool = True,
) -> Any:
    """``GPTModel`` with the local (non-Transformer-Engine) layer spec; ``vocab_size`` is already padded.

    ``pre_process``/``post_process``: this pipeline stage holds the embedding / the output layer.
    """
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    spec = get_gpt_layer_local_spec(qk_layernorm=config.qk_layernorm, normalization=config.normalization)
    return GPTModel(
        config=config,
        transformer_layer_spec=spec,
        vocab_size=vocab_size,
        max_sequence_length=max_positions,
        position_embedding_type=position,
        rotary_percent=rotary_percent,
        rotary_base=int(rotary_base),
        share_embeddings_and_output_weights=tied,
        pre_process=pre_process,
        post_process=post_process,
    )


def build_model(args: argparse.Namespace, vocab_size: int) -> Any:
    """``GPTModel`` for Megatron-LM arguments (what the trainer trains)."""
    return gpt_model(
        transformer_config(args),
        vocab_size,
        args.max_position_embeddings,
        args.position_embedding_type,
        args.rotary_percent,
        args.rotary_base,
        tied=not args.untie_embeddings_and_output_weights,
    )


def causal_mask(seq_length: int, device: torch.device) -> torch.Tensor:
    """Megatron's boolean attention mask: True = masked."""
    return torch.triu(torch.ones(1, 1, seq_length, seq_length, dtype=torch.bool, device=device), diagonal=1)
