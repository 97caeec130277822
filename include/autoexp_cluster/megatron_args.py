"""The subset of Megatron-LM's command line that autoexp's trainer implements, with Megatron's dest names."""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Sequence

log = logging.getLogger(__name__)

# Flags that only steer Megatron-LM's GPU kernels, communication overlap or sharding. They change
# speed or memory, not the model or the maths on one data-parallel group, so they are accepted and
# named in one warning line. (flag, number of values it takes)
IGNORED_FLAGS: dict[str, int] = {
    "--use-flash-attn": 0,
    "--overlap-grad-reduce": 0,
    "--overlap-param-gather": 0,
    "--use-distributed-optimizer": 0,
    "--sequence-parallel": 0,
    "--log-throughput": 0,
    "--use-checkpoint-args": 0,
    "--no-masked-softmax-fusion": 0,
    "--no-bias-gelu-fusion": 0,
    "--no-bias-swiglu-fusion": 0,
    "--no-gradient-accumulation-fusion": 0,
    "--use-mcore-models": 0,
    "--transformer-impl": 1,
    "--attention-backend": 1,
    "--num-workers": 1,
    "--distributed-timeout-minutes": 1,
    "--log-num-zeros-in-grad": 0,
    "--log-params-norm": 0,
    "--log-timers-to-tensorboard": 0,
    "--log-validation-ppl-to-tensorboard": 0,
    "--timing-log-level": 1,
    "--wandb-project": 1,
    "--wandb-exp-name": 1,
}


class ArgumentError(Exception):
    """A Megatron argument autoexp's trainer cannot honour; ``str()`` is one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ArgumentError(message)


def build_parser() -> argparse.ArgumentParser:
    """Megatron-LM-compatible parser (flag spellings and dest names as in Megatron-LM)."""
    p = _Parser(prog="pretrain_gpt.py", add_help=True, allow_abbrev=False)
    a = p.add_argument
    # model
    a("--num-layers", type=int, required=True)
    a("--hidden-size", type=int, required=True)
    a("--num-attention-heads", type=int, required=True)
    a("--ffn-hidden-size", type=int, default=None)
    a("--kv-channels", type=int, default=None)
    a("--group-query-attention", action="store_true")
    a("--num-query-groups", type=int, default=1)
    a("--seq-length", type=int, required=True)
    a("--max-position-embeddings", type=int, default=None)
    a("--position-embedding-type", choices=["learned_absolute", "rope", "none"], default="learned_absolute")
    a("--rotary-base", type=int, default=10000)
    a("--rotary-percent", type=float, default=1.0)
    a("--rotary-interleaved", action="store_true")
    a("--normalization", choices=["LayerNorm", "RMSNorm"], default="LayerNorm")
    a("--norm-epsilon", dest="layernorm_epsilon", type=float, default=1e-5)
    a("--apply-layernorm-1p", action="store_true")
    a("--swiglu", action="store_true")
    a("--qk-layernorm", action="store_true")
    a("--disable-bias-linear", dest="add_bias_linear", action="store_false")
    a("--add-qkv-bias", action="store_true")
    a("--untie-embeddings-and-output-weights", action="store_true")
    a("--hidden-dropout", type=float, default=0.1)
    a("--attention-dropout", type=float, default=0.1)
    a("--init-method-std", type=float, default=0.02)
    a("--make-vocab-size-divisible-by", type=int, default=128)
    # parallelism
    a("--tensor-model-parallel-size", type=int, default=1)
    a("--pipeline-model-parallel-size", type=int, default=1)
    a("--distributed-backend", choices=["nccl", "gloo"], default="nccl")
    # batch / length
    a("--micro-batch-size", type=int, required=True)
    a("--global-batch-size", type=int, default=None)
    a("--train-iters", type=int, required=True)
    # optimiser
    a("--optimizer", choices=["adam"], default="adam")
    a("--lr", type=float, required=True)
    a("--min-lr", type=float, default=0.0)
    a("--lr-warmup-init", type=float, default=0.0)
    a(
        "--lr-decay-style",
        choices=["constant", "linear", "cosine", "inverse-square-root", "WSD"],
        default="linear",
    )
    a(
        "--lr-wsd-decay-style",
        choices=["linear", "cosine", "exponential", "minus_sqrt"],
        default="exponential",
    )
    a("--lr-warmup-iters", type=int, default=0)
    a("--lr-decay-iters", type=int, default=None)
    a("--lr-wsd-decay-iters", type=int, default=None)
    a("--weight-decay", type=float, default=0.01)
    a("--adam-beta1", type=float, default=0.9)
    a("--adam-beta2", type=float, default=0.999)
    a("--adam-eps", type=float, default=1e-8)
    a("--clip-grad", type=float, default=1.0)
    a("--override-opt_param-scheduler", dest="override_opt_param_scheduler", action="store_true")
    a("--use-checkpoint-opt_param-scheduler", dest="use_checkpoint_opt_param_scheduler", action="store_true")
    a("--bf16", action="store_true")
    a("--fp16", action="store_true")
    a("--seed", type=int, default=1234)
    # data
    a("--data-path", nargs="+", default=None)
    a("--split", default="969, 30, 1")
    a("--tokenizer-type", default="HuggingFaceTokenizer")
    a("--tokenizer-model", default=None)
    a("--data-cache-path", default=None)
    # checkpoints / logging
    a("--save", default=None)
    a("--load", default=None)
    a("--save-interval", type=int, default=None)
    a("--ckpt-format", choices=["torch", "torch_dist"], default="torch_dist")
    a("--no-load-optim", action="store_true")
    a("--no-load-rng", action="store_true")
    a("--finetune", action="store_true")
    a("--exit-duration-in-mins", type=float, default=None)
    a("--exit-interval", type=int, default=None)
    a("--exit-signal-handler", action="store_true")
    a("--log-interval", type=int, default=100)
    a("--eval-interval", type=int, default=1000)
    a("--eval-iters", type=int, default=100)
    a("--tensorboard-dir", default=None)
    return p


def split_ignored(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Remove the accepted-but-ignored flags (and their values) from argv."""
    kept: list[str] = []
    ignored: list[str] = []
    i = 0
    while i < len(argv):
        flag = argv[i].split("=", 1)[0]
        if flag in IGNORED_FLAGS:
            ignored.append(flag)
            i += 1 + (IGNORED_FLAGS[flag] if "=" not in argv[i] else 0)
            continue
        kept.append(argv[i])
        i += 1
    return kept, ignored


def parse_args(argv: Sequence[str], world_size: int = 1) -> argparse.Namespace:
    """Parse and validate Megatron arguments; raise ``ArgumentError`` with a one-line message."""
    kept, ignored = split_ignored(argv)
    args = build_parser().parse_args(kept)
    if ignored:
        log.warning(
            "ignoring Megatron-LM flags that only matter for its GPU kernels/sharding: %s", " ".join(ignored)
        )
    args.ignored_flags = ignored
    args.world_size = world_size
    if args.tensor_model_parallel_size != 1 or args.pipeline_model_parallel_size != 1:
        raise ArgumentError(
            "autoexp's trainer is data-parallel only (--tensor/pipeline-model-parallel-size 1); "
            "use Megatron-LM's pretrain_gpt.py for TP/PP > 1"
        )
    if args.apply_layernorm_1p:
        raise ArgumentError("--apply-layernorm-1p is not supported by autoexp's trainer (torch norms only)")
    if args.fp16:
        raise ArgumentError("--fp16 is not supported by autoexp's trainer (use --bf16)")
    if args.hidden_size % args.num_attention_heads:
        raise ArgumentError(
            f"--hidden-size {args.hidden_size} is not divisible by "
            f"--num-attention-heads {args.num_attention_heads}"
        )
    if args.ffn_hidden_size is None:
        # Megatron-LM's default, shrunk by 2/3 for SwiGLU to keep the parameter count.
        args.ffn_hidden_size = 4 * args.hidden_size
        if args.swiglu:
            args.ffn_hidden_size = int((4 * args.hidden_size * 2 / 3) / 64) * 64
    if args.kv_channels is None:
        args.kv_channels = args.hidden_size // args.num_attention_heads
    if not args.group_query_attention:
        args.num_query_groups = args.num_attention_heads
    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if args.position_embedding_type == "learned_absolute" and args.seq_length > args.max_position_embeddings:
        raise ArgumentError(
            f"--seq-length {args.seq_length} exceeds --max-position-embeddings {args.max_position_embeddings}"
        )
    if args.global_batch_size is None:
        args.global_batch_size = args.micro_batch_size * world_size
    if args.global_batch_size % (args.micro_batch_size * world_size):
        raise ArgumentError(
            f"--global-batch-size {args.global_batch_size} is not a multiple of --micro-batch-size "
            f"{args.micro_batch_size} x data-parallel size {world_size}"
        )
    if args.lr_decay_iters is None:
        args.lr_decay_iters = args.train_iters
    if args.lr_decay_style == "WSD" and args.lr_wsd_decay_iters is None:
        raise ArgumentError("--lr-decay-style WSD needs --lr-wsd-decay-iters")
    if args.override_opt_param_scheduler and args.use_checkpoint_opt_param_scheduler:
        raise ArgumentError(
            "both --override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are set"
        )
    if args.data_path is None:
        raise ArgumentError("--data-path is required")
    if args.tokenizer_type != "HuggingFaceTokenizer":
        raise ArgumentError(
            f"--tokenizer-type {args.tokenizer_type} is not supported by autoexp's trainer "
            "(HuggingFaceTokenizer only)"
        )
    if args.tokenizer_model is None:
        raise ArgumentError("--tokenizer-model is required")
    if args.save_interval is not None and args.save_interval <= 0:
        raise ArgumentError("--save-interval must be positive")
    # Megatron-LM names: the converter reads these from the saved args.
    args.untie_embeddings_and_output_weights = bool(args.untie_embeddings_and_output_weights)
    args.norm_epsilon = args.layernorm_epsilon
    args.params_dtype_name = "bfloat16" if args.bf16 else "float32"
    return args


def padded_vocab_size(vocab_size: int, divisible_by: int, tp: int = 1) -> int:
    """Megatron-LM's vocab padding: a multiple of ``divisible_by * tp``."""
    multiple = divisible_by * tp
    return int(math.ceil(vocab_size / multiple) * multiple)
