"""Megatron-LM's optimizer and learning-rate schedule (the CPU trainer's, and the test checkpoints')."""

from __future__ import annotations

import argparse
from typing import Any

import torch


def build_optimizer(model: torch.nn.Module, args: argparse.Namespace) -> torch.optim.Optimizer:
    """AdamW with Megatron-LM's parameter groups: no weight decay on biases and 1-D (norm) params."""
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if name.endswith(".bias") or p.dim() == 1 else decay).append(p)
    groups = [
        {"params": decay, "wd_mult": 1.0},
        {"params": no_decay, "wd_mult": 0.0},
    ]
    # megatron's FP32Optimizer hard-codes CUDA; plain AdamW is the same update rule.
    return torch.optim.AdamW(
        [g for g in groups if g["params"]],
        lr=args.lr,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_eps,
        weight_decay=args.weight_decay,
    )


def build_scheduler(opt: torch.optim.Optimizer, args: argparse.Namespace) -> Any:
    """megatron-core's ``OptimizerParamScheduler`` with Megatron-LM's sample-based step counts."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    gbs = args.global_batch_size
    return OptimizerParamScheduler(
        opt,
        init_lr=args.lr_warmup_init,
        max_lr=args.lr,
        min_lr=args.min_lr,
        lr_warmup_steps=args.lr_warmup_iters * gbs,
        lr_decay_steps=args.lr_decay_iters * gbs,
        lr_decay_style=args.lr_decay_style,
        start_wd=args.weight_decay,
        end_wd=args.weight_decay,
        wd_incr_steps=args.train_iters * gbs,
        wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=args.use_checkpoint_opt_param_scheduler,
        override_opt_param_scheduler=args.override_opt_param_scheduler,
        wsd_decay_steps=None if args.lr_wsd_decay_iters is None else args.lr_wsd_decay_iters * gbs,
        lr_wsd_decay_style=args.lr_wsd_decay_style,
    )
