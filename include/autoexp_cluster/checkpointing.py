"""Save and load Megatron-LM checkpoints (legacy ``torch`` and ``torch_dist``), atomically."""

from __future__ import annotations

import argparse
import logging
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from autoexp_cluster.safe_pickle import allowed_for, load_dcp_metadata, torch_load

log = logging.getLogger(__name__)

TRACKER = "latest_checkpointed_iteration.txt"
CHECKPOINT_VERSION = 3.0


def iter_dir_name(iteration: int) -> str:
    """Megatron-LM's iteration directory name."""
    return f"iter_{iteration:07d}"


def read_tracker(save_dir: Path) -> int | None:
    """The iteration in ``latest_checkpointed_iteration.txt``, or None when there is none."""
    tracker = save_dir / TRACKER
    if not tracker.is_file():
        return None
    text = tracker.read_text().strip()
    if text == "release":
        return 0
    try:
        return int(text)
    except ValueError as exc:
        raise ValueError(f"{tracker}: not an iteration number: {text!r}") from exc


def detect_format(ckpt_dir: Path) -> str:
    """``torch_dist`` or ``torch`` (Megatron-LM's own detection order)."""
    if (ckpt_dir / "metadata.json").is_file():
        return "torch_dist"
    if any(ckpt_dir.glob("mp_rank_*/model_optim_rng.pt")):
        return "torch"
    raise FileNotFoundError(f"{ckpt_dir}: neither a torch_dist nor a legacy torch checkpoint")


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def rng_state() -> dict[str, Any]:
    """Every RNG the training step touches (Megatron-LM's rng_state fields)."""
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    return {
        "random_rng_state": random.getstate(),
        "np_rng_state": np.random.get_state(),
        "torch_rng_state": torch.get_rng_state(),
        "cuda_rng_state": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
        "rng_tracker_states": get_cuda_rng_tracker().get_states(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` captured."""
    from megatron.core.tensor_parallel.random import get_cuda_rng_tracker

    random.setstate(state["random_rng_state"])
    np.random.set_state(state["np_rng_state"])
    torch.set_rng_state(state["torch_rng_state"])
    if state.get("cuda_rng_state") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda_rng_state"])
    get_cuda_rng_tracker().set_states(state["rng_tracker_states"])


@dataclass
class Loaded:
    """What a resume needs besides the tensors already put into the model and optimizer."""

    iteration: int
    path: Path
    fmt: str


def _init_adam_state(opt: torch.optim.Optimizer) -> None:
    # A template for loading needs the state tensors to exist before the first step.
    for group in opt.param_groups:
        for p in group["params"]:
            if p not in opt.state or not opt.state[p]:
                opt.state[p] = {
                    "step": torch.tensor(0.0),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }


def _sharded_optimizer_state(
    model: Any, opt: torch.optim.Optimizer, model_sd: dict[str, Any]
) -> dict[str, Any]:
    # What megatron's FP32Optimizer.sharded_state_dict produces, for a plain torch AdamW.
    from megatron.core.dist_checkpointing.optimizer import (
        get_param_id_to_sharded_param_map,
        optim_state_to_sharding_state,
    )

    _init_adam_state(opt)
    osd = opt.state_dict()
    params = [p for g in opt.param_groups for p in g["params"]]
    idmap = get_param_id_to_sharded_param_map(model_sd, params)
    step = next(iter(osd["state"].values()))["step"]
    optim_state_to_sharding_state(osd, idmap, exclude_keys="step")
    osd["state"]["common_step"] = step
    return osd


def _common(args: argparse.Namespace, iteration: int, scheduler: Any, flops: float) -> dict[str, Any]:
    return {
        "args": args,
        "checkpoint_version": CHECKPOINT_VERSION,
        "iteration": iteration,
        "opt_param_scheduler": scheduler.state_dict(),
        "num_floating_point_operations_so_far": flops,
    }


def save_checkpoint(
    save_dir: Path,
    iteration: int,
    model: Any,
    opt: torch.optim.Optimizer,
    scheduler: Any,
    args: argparse.Namespace,
    fmt: str,
    flops: float = 0.0,
) -> Path:
    """Write ``iter_%07d`` into a temporary dir, rename it into place, then update the tracker.

    A crash at any point leaves either the previous tracker or a complete new checkpoint: the
    tracker is only rewritten (atomically) after the directory rename.
    """
    final = save_dir / iter_dir_name(iteration)
    tmp = save_dir / f".{iter_dir_name(iteration)}.tmp"
    if _rank() == 0:
        save_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier()
    state = _common(args, iteration, scheduler, flops)
    if fmt == "torch_dist":
        from megatron.core import dist_checkpointing

        model_sd = model.sharded_state_dict()
        state["model"] = model_sd
        state["optimizer"] = _sharded_optimizer_state(model, opt, model_sd)
        state["rng_state"] = rng_state()
        dist_checkpointing.save(state, str(tmp))
    elif _rank() == 0:
        state["model"] = model.state_dict_for_save_checkpoint()
        state["optimizer"] = {"optimizer": opt.state_dict()}
        state["rng_state"] = [rng_state()]
        (tmp / "mp_rank_00").mkdir()
        torch.save(state, tmp / "mp_rank_00" / "model_optim_rng.pt")
    _barrier()
    if _rank() == 0:
        _fsync_tree(tmp)
        if final.exists():
            # Re-saving an iteration (e.g. a signal right after a periodic save): replace it whole.
            old = save_dir / f".{iter_dir_name(iteration)}.old"
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
        tracker_tmp = save_dir / f".{TRACKER}.tmp"
        tracker_tmp.write_text(f"{iteration}\n")
        os.replace(tracker_tmp, save_dir / TRACKER)
        _fsync_dir(save_dir)
    _barrier()
    return final


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(root)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load_checkpoint(
    load_dir: Path,
    model: Any,
    opt: torch.optim.Optimizer,
    scheduler: Any,
    args: argparse.Namespace,
) -> Loaded | None:
    """Resume from the tracker's iteration in ``load_dir`` (either format); None when there is none."""
    iteration = read_tracker(load_dir)
    if iteration is None:
        return None
    path = load_dir / iter_dir_name(iteration)
    fmt = detect_format(path)
    load_optim = not (args.finetune or args.no_load_optim)
    if fmt == "torch_dist":
        from megatron.core import dist_checkpointing

        model_sd = model.sharded_state_dict()
        template: dict[str, Any] = {"model": model_sd}
        if load_optim:
            template["optimizer"] = _sharded_optimizer_state(model, opt, model_sd)
        # megatron's loader unpickles .metadata with plain pickle and common.pt with weights_only
        # but its own raw error: vet both first (one-line refusal); then load with Megatron-LM's
        # own classes as placeholders.
        load_dcp_metadata(path / ".metadata")
        torch_load(path / "common.pt")
        with allowed_for(path / "common.pt"):
            loaded = dist_checkpointing.load(template, str(path))
        model.load_state_dict(loaded["model"])
        if load_optim:
            osd = loaded["optimizer"]
            step = osd["state"].pop("common_step")
            for param_state in osd["state"].values():
                param_state["step"] = step.clone() if torch.is_tensor(step) else step
            opt.load_state_dict(osd)
        rng = loaded.get("rng_state")
    else:
        # weights_only=True + allow-list: the args Namespace, numpy RNG state, Megatron's enums inert.
        loaded = torch_load(path / "mp_rank_00" / "model_optim_rng.pt")
        model.load_state_dict(loaded["model"])
        if load_optim:
            opt.load_state_dict(loaded["optimizer"]["optimizer"])
        rng = loaded.get("rng_state")
        if isinstance(rng, list):
            rng = rng[0] if rng else None
    if load_optim and "opt_param_scheduler" in loaded:
        # With --override-opt_param-scheduler the class values win but num_steps is restored
        # (megatron-core's own load_state_dict semantics).
        scheduler.load_state_dict(loaded["opt_param_scheduler"])
    if rng is not None and not (args.finetune or args.no_load_rng):
        set_rng_state(rng)
    it = 0 if args.finetune else int(loaded.get("iteration", iteration))
    log.info("loaded %s checkpoint %s (iteration %d)", fmt, path, it)
    return Loaded(iteration=it, path=path, fmt=fmt)
