"""Exact Megatron -> HuggingFace mappings: pick the architecture from the saved args, map every tensor."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

import torch

from autoexp_cluster.safe_pickle import Placeholder


class UnsupportedArchitectureError(Exception):
    """No exact HF architecture for this Megatron configuration; ``str()`` names the options."""


class UnreadableArgError(Exception):
    """A saved arg the converter needs holds an object of a package this process does not import."""

    def __init__(self, name: str, value: object) -> None:
        super().__init__(f"field args.{name} holds {value!r}, which the converter cannot read")


@dataclass
class Arch:
    """Megatron model facts read from the saved args (old and new Megatron-LM spellings)."""

    num_layers: int
    hidden: int
    heads: int
    groups: int
    head_dim: int
    ffn: int
    vocab: int
    max_pos: int
    position: str
    rotary_base: float
    rotary_percent: float
    norm: str
    eps: float
    swiglu: bool
    bias: bool
    qkv_bias: bool
    qk_layernorm: bool
    tied: bool
    extra: dict[str, Any] = field(default_factory=dict)


def arch_from_args(args: argparse.Namespace, tensors: dict[str, torch.Tensor]) -> Arch:
    """Read the model shape; refuse options no HF class reproduces exactly."""
    saved = vars(args)

    def g(name: str, default: Any = None) -> Any:
        # Only the fields read here must be plain values; any other field may be a placeholder.
        value = saved.get(name, default)
        if isinstance(value, Placeholder):
            raise UnreadableArgError(name, value)
        return value

    def req(name: str) -> int:
        value = g(name)
        if value is None:
            raise KeyError(name)
        return int(value)

    heads = req("num_attention_heads")
    hidden = req("hidden_size")
    groups = int(g("num_query_groups") or heads) if g("group_query_attention") else heads
    head_dim = int(g("kv_channels") or hidden // heads)
    eps = g("layernorm_epsilon", None)
    if eps is None:
        eps = g("norm_epsilon", 1e-5)
    vocab = int(tensors["embedding.word_embeddings.weight"].shape[0])
    position = str(g("position_embedding_type", "learned_absolute"))
    norm = str(g("normalization", "LayerNorm"))
    refused = [
        name
        for name, on in [
            ("--rotary-interleaved", g("rotary_interleaved")),
            ("--apply-layernorm-1p", g("apply_layernorm_1p")),
            ("--squared-relu", g("squared_relu")),
            ("--openai-gelu", g("openai_gelu")),
            ("--num-experts", g("num_experts")),
            ("--multi-latent-attention", g("multi_latent_attention")),
            ("--qk-l2-norm", g("qk_l2_norm")),
        ]
        if on
    ]
    if refused:
        raise UnsupportedArchitectureError(f"no exact HF equivalent for {', '.join(refused)}")
    return Arch(
        num_layers=req("num_layers"),
        hidden=hidden,
        heads=heads,
        groups=groups,
        head_dim=head_dim,
        ffn=int(g("ffn_hidden_size") or 4 * hidden),
        vocab=vocab,
        max_pos=int(g("max_position_embeddings") or req("seq_length")),
        position=position,
        rotary_base=float(g("rotary_base", 10000)),
        rotary_percent=float(g("rotary_percent", 1.0)),
        norm=norm,
        eps=float(eps),
        swiglu=bool(g("swiglu")),
        bias=bool(g("add_bias_linear", True)),
        qkv_bias=bool(g("add_bias_linear", True) or g("add_qkv_bias")),
        qk_layernorm=bool(g("qk_layernorm")),
        tied=not bool(g("untie_embeddings_and_output_weights")),
    )


def choose_family(a: Arch) -> str:
    """``gpt2`` | ``gpt_neox`` | ``llama`` | ``qwen3`` | ``autoexp_llama`` (remote code), or refuse."""
    combo = (
        f"position={a.position} normalization={a.norm} swiglu={a.swiglu} qk_layernorm={a.qk_layernorm} "
        f"bias={a.bias} qkv_bias={a.qkv_bias} query_groups={a.groups}/{a.heads} "
        f"rotary_percent={a.rotary_percent}"
    )
    if a.norm == "LayerNorm" and not a.swiglu and not a.qk_layernorm and a.groups == a.heads:
        if a.position == "learned_absolute" and a.head_dim * a.heads == a.hidden:
            return "gpt2"
        if a.position == "rope":
            return "gpt_neox"
    if a.norm == "RMSNorm" and a.swiglu and a.position == "rope" and a.rotary_percent == 1.0:
        if a.bias != a.qkv_bias:
            raise UnsupportedArchitectureError(
                f"no exact HF class for --add-qkv-bias without linear bias ({combo})"
            )
        if not a.qk_layernorm:
            return "llama"
        # Qwen3 = Llama + per-head q/k RMSNorm before RoPE, but its MLP never has a bias.
        return "autoexp_llama" if a.bias else "qwen3"
    raise UnsupportedArchitectureError(
        f"no exact HF architecture for {combo}; supported: learned_absolute|rope + LayerNorm + GELU (MHA), "
        "rope + RMSNorm + SwiGLU (+GQA, +qk-layernorm, +-bias)"
    )


def _split_qkv(w: torch.Tensor, a: Arch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # Megatron groups rows per query group: [q_0..q_{hpg-1} | k | v] for each of `groups` groups.
    hpg = a.heads // a.groups
    rest = w.shape[1:]
    w = w.reshape(a.groups, (hpg + 2) * a.head_dim, *rest)
    q = w[:, : hpg * a.head_dim].reshape(a.heads * a.head_dim, *rest)
    k = w[:, hpg * a.head_dim : (hpg + 1) * a.head_dim].reshape(a.groups * a.head_dim, *rest)
    v = w[:, (hpg + 1) * a.head_dim :].reshape(a.groups * a.head_dim, *rest)
    return q, k, v


def _bias(t: dict[str, torch.Tensor], key: str, size: int, like: torch.Tensor) -> torch.Tensor:
    # HF classes that always carry a bias get zeros where Megatron had none: the function is identical.
    b = t.get(key)
    return b if b is not None else torch.zeros(size, dtype=like.dtype)


def hf_config(a: Arch, family: str, dtype: torch.dtype) -> dict[str, Any]:
    """config.json content for ``family`` (transformers 5 field names)."""
    dtype_name = str(dtype).removeprefix("torch.")
    common: dict[str, Any] = {"vocab_size": a.vocab, "tie_word_embeddings": a.tied, "dtype": dtype_name}
    rope = {"rope_type": "default", "rope_theta": a.rotary_base}
    if family == "gpt2":
        return {
            **common, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"],
            "n_embd": a.hidden, "n_layer": a.num_layers, "n_head": a.heads, "n_inner": a.ffn,
            "n_positions": a.max_pos, "layer_norm_epsilon": a.eps,
            # GPT-2's default "gelu_new" is the tanh approximation; Megatron uses exact erf GELU.
            "activation_function": "gelu",
            "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        }  # fmt: skip
    if family == "gpt_neox":
        return {
            **common, "model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
            "hidden_size": a.hidden, "num_hidden_layers": a.num_layers, "num_attention_heads": a.heads,
            "intermediate_size": a.ffn, "max_position_embeddings": a.max_pos, "layer_norm_eps": a.eps,
            "hidden_act": "gelu", "attention_bias": True,
            # Megatron's residual is sequential; NeoX defaults to parallel attention+MLP.
            "use_parallel_residual": False,
            "rope_parameters": {**rope, "partial_rotary_factor": a.rotary_percent},
            "hidden_dropout": 0.0, "attention_dropout": 0.0,
        }  # fmt: skip
    cfg = {
        **common, "hidden_size": a.hidden, "num_hidden_layers": a.num_layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.groups, "head_dim": a.head_dim,
        "intermediate_size": a.ffn, "max_position_embeddings": a.max_pos, "rms_norm_eps": a.eps,
        "hidden_act": "silu", "attention_bias": a.bias, "rope_parameters": rope, "attention_dropout": 0.0,
    }  # fmt: skip
    if family == "llama":
        return {**cfg, "model_type": "llama", "architectures": ["LlamaForCausalLM"], "mlp_bias": a.bias}
    if family == "qwen3":
        return {
            **cfg,
            "model_type": "qwen3",
            "architectures": ["Qwen3ForCausalLM"],
            "use_sliding_window": False,
        }
    return {
        **cfg, "model_type": "autoexp_llama", "architectures": ["AutoexpLlamaForCausalLM"],
        "mlp_bias": a.bias, "qk_layernorm": True,
        "auto_map": {
            "AutoConfig": "configuration_autoexp_llama.AutoexpLlamaConfig",
            "AutoModelForCausalLM": "modeling_autoexp_llama.AutoexpLlamaForCausalLM",
        },
    }  # fmt: skip


def map_tensors(t: dict[str, torch.Tensor], a: Arch, family: str) -> dict[str, torch.Tensor]:
    """HF state dict (contiguous tensors) for ``family`` from canonical Megatron tensors."""
    if family == "gpt2":
        return _map_gpt2(t, a)
    if family == "gpt_neox":
        return _map_neox(t, a)
    return _map_llama(t, a, family)


def _map_gpt2(t: dict[str, torch.Tensor], a: Arch) -> dict[str, torch.Tensor]:
    out = {"transformer.wte.weight": t["embedding.word_embeddings.weight"]}
    out["transformer.wpe.weight"] = t["embedding.position_embeddings.weight"]
    for i in range(a.num_layers):
        m, h = f"decoder.layers.{i}.", f"transformer.h.{i}."
        qkv_w = t[m + "self_attention.linear_qkv.weight"]
        qkv_b = _bias(t, m + "self_attention.linear_qkv.bias", qkv_w.shape[0], qkv_w)
        # GPT-2's Conv1D stores [in, out]: every linear is transposed; c_attn is [q | k | v].
        out[h + "attn.c_attn.weight"] = torch.cat(_split_qkv(qkv_w, a)).T
        out[h + "attn.c_attn.bias"] = torch.cat(_split_qkv(qkv_b, a))
        proj = t[m + "self_attention.linear_proj.weight"]
        out[h + "attn.c_proj.weight"] = proj.T
        out[h + "attn.c_proj.bias"] = _bias(t, m + "self_attention.linear_proj.bias", a.hidden, proj)
        fc1, fc2 = t[m + "mlp.linear_fc1.weight"], t[m + "mlp.linear_fc2.weight"]
        out[h + "mlp.c_fc.weight"] = fc1.T
        out[h + "mlp.c_fc.bias"] = _bias(t, m + "mlp.linear_fc1.bias", a.ffn, fc1)
        out[h + "mlp.c_proj.weight"] = fc2.T
        out[h + "mlp.c_proj.bias"] = _bias(t, m + "mlp.linear_fc2.bias", a.hidden, fc2)
        for src, dst in (("input_layernorm", "ln_1"), ("pre_mlp_layernorm", "ln_2")):
            out[h + dst + ".weight"] = t[m + src + ".weight"]
            out[h + dst + ".bias"] = t[m + src + ".bias"]
    out["transformer.ln_f.weight"] = t["decoder.final_layernorm.weight"]
    out["transformer.ln_f.bias"] = t["decoder.final_layernorm.bias"]
    if not a.tied:
        out["lm_head.weight"] = t["output_layer.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def _map_neox(t: dict[str, torch.Tensor], a: Arch) -> dict[str, torch.Tensor]:
    out = {"gpt_neox.embed_in.weight": t["embedding.word_embeddings.weight"]}
    for i in range(a.num_layers):
        m, h = f"decoder.layers.{i}.", f"gpt_neox.layers.{i}."
        qkv = t[m + "self_attention.linear_qkv.weight"]
        # NeoX's query_key_value is per-head [q|k|v] interleaved: exactly Megatron's MHA layout.
        out[h + "attention.query_key_value.weight"] = qkv
        out[h + "attention.query_key_value.bias"] = _bias(
            t, m + "self_attention.linear_qkv.bias", qkv.shape[0], qkv
        )
        proj = t[m + "self_attention.linear_proj.weight"]
        out[h + "attention.dense.weight"] = proj
        out[h + "attention.dense.bias"] = _bias(t, m + "self_attention.linear_proj.bias", a.hidden, proj)
        fc1, fc2 = t[m + "mlp.linear_fc1.weight"], t[m + "mlp.linear_fc2.weight"]
        out[h + "mlp.dense_h_to_4h.weight"] = fc1
        out[h + "mlp.dense_h_to_4h.bias"] = _bias(t, m + "mlp.linear_fc1.bias", a.ffn, fc1)
        out[h + "mlp.dense_4h_to_h.weight"] = fc2
        out[h + "mlp.dense_4h_to_h.bias"] = _bias(t, m + "mlp.linear_fc2.bias", a.hidden, fc2)
        for src, dst in (
            ("input_layernorm", "input_layernorm"),
            ("pre_mlp_layernorm", "post_attention_layernorm"),
        ):
            out[h + dst + ".weight"] = t[m + src + ".weight"]
            out[h + dst + ".bias"] = t[m + src + ".bias"]
    out["gpt_neox.final_layer_norm.weight"] = t["decoder.final_layernorm.weight"]
    out["gpt_neox.final_layer_norm.bias"] = t["decoder.final_layernorm.bias"]
    if not a.tied:
        out["lm_head.weight"] = t["output_layer.weight"]
    return {k: v.contiguous() for k, v in out.items()}


def _map_llama(t: dict[str, torch.Tensor], a: Arch, family: str) -> dict[str, torch.Tensor]:
    out = {"model.embed_tokens.weight": t["embedding.word_embeddings.weight"]}
    for i in range(a.num_layers):
        m, h = f"decoder.layers.{i}.", f"model.layers.{i}."
        kinds = ("weight", "bias") if a.bias else ("weight",)
        for kind in kinds:
            parts = _split_qkv(t[m + f"self_attention.linear_qkv.{kind}"], a)
            for proj, part in zip(("q_proj", "k_proj", "v_proj"), parts, strict=True):
                out[h + f"self_attn.{proj}.{kind}"] = part
            out[h + f"self_attn.o_proj.{kind}"] = t[m + f"self_attention.linear_proj.{kind}"]
        if a.qk_layernorm:
            out[h + "self_attn.q_norm.weight"] = t[m + "self_attention.q_layernorm.weight"]
            out[h + "self_attn.k_norm.weight"] = t[m + "self_attention.k_layernorm.weight"]
        for kind in kinds:
            # Megatron's GLU is act(x[:ffn]) * x[ffn:]: the first half is the gate.
            gate, up = t[m + f"mlp.linear_fc1.{kind}"].chunk(2, dim=0)
            out[h + f"mlp.gate_proj.{kind}"] = gate
            out[h + f"mlp.up_proj.{kind}"] = up
            out[h + f"mlp.down_proj.{kind}"] = t[m + f"mlp.linear_fc2.{kind}"]
        out[h + "input_layernorm.weight"] = t[m + "input_layernorm.weight"]
        out[h + "post_attention_layernorm.weight"] = t[m + "pre_mlp_layernorm.weight"]
    out["model.norm.weight"] = t["decoder.final_layernorm.weight"]
    if not a.tied:
        out["lm_head.weight"] = t["output_layer.weight"]
    return {k: v.contiguous() for k, v in out.items()}
