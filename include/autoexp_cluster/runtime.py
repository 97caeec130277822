"""The training process's distributed runtime: torch.distributed and megatron's model-parallel state,
seeding, and the collective helpers the loop uses (one rank or many, CPU with gloo, GPU with NCCL)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from autoexp_cluster.cpu_shim import apply_cpu_shim

log = logging.getLogger("autoexp_cluster.trainer")


@dataclass
class Runtime:
    """Process-group facts the loop needs."""

    rank: int
    world_size: int
    device: torch.device
    stop_signal: list[int] = field(default_factory=list)


def say(rt: Runtime, text: str) -> None:
    # Megatron-LM prints its progress on rank 0 to stdout; tools grep these exact lines.
    if rt.rank == 0:
        print(text, flush=True)


def init_runtime(args: argparse.Namespace) -> Runtime:
    """Initialise torch.distributed (torchrun env or a private single-process store) and megatron."""
    from megatron.core import parallel_state

    use_cuda = torch.cuda.is_available()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    backend = "nccl" if use_cuda else "gloo"
    if args.distributed_backend != backend:
        log.info(
            "using %s instead of --distributed-backend %s (CUDA available: %s)",
            backend,
            args.distributed_backend,
            use_cuda,
        )
    if use_cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        if "MASTER_ADDR" in os.environ and world > 1:
            dist.init_process_group(backend, rank=rank, world_size=world)
        else:
            # A private store: no TCP port, so concurrent single-process runs never collide.
            store = dist.HashStore()  # type: ignore[attr-defined]
            dist.init_process_group(backend, store=store, rank=0, world_size=1)
            rank, world = 0, 1
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(1, 1)
    if not use_cuda:
        apply_cpu_shim()
    if args.bf16 and not use_cuda:
        log.warning("--bf16 without CUDA: training in float32 (bf16 autocast is used on GPUs only)")
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    return Runtime(rank=rank, world_size=world, device=device)


def seed_everything(seed: int) -> None:
    """Megatron-LM's seeding: python, numpy, torch and the model-parallel RNG tracker."""
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker, model_parallel_cuda_manual_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    get_cuda_rng_tracker().reset()
    model_parallel_cuda_manual_seed(seed)


def autocast(args: argparse.Namespace, rt: Runtime) -> contextlib.AbstractContextManager[Any]:
    if args.bf16 and rt.device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def allreduce_mean(tensors: Sequence[torch.Tensor], rt: Runtime) -> None:
    if rt.world_size > 1:
        for t in tensors:
            dist.all_reduce(t)
            t.div_(rt.world_size)


def any_rank(flag: bool, rt: Runtime) -> bool:
    if rt.world_size == 1:
        return flag
    t = torch.tensor([1.0 if flag else 0.0], device=rt.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item() > 0)
