"""Megatron-LM-compatible pretraining loop on megatron-core (CPU with gloo, GPU with NCCL via torchrun)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist

from autoexp_cluster.checkpointing import load_checkpoint, save_checkpoint
from autoexp_cluster.data import build_datasets, get_batch, load_tokenizer
from autoexp_cluster.megatron_args import ArgumentError, padded_vocab_size, parse_args
from autoexp_cluster.model import build_model, causal_mask
from autoexp_cluster.optimizer import build_optimizer, build_scheduler
from autoexp_cluster.runtime import (
    Runtime,
    allreduce_mean,
    any_rank,
    autocast,
    init_runtime,
    say,
    seed_everything,
)
from autoexp_cluster.safe_pickle import UnsafeCheckpointError

log = logging.getLogger("autoexp_cluster.trainer")

DONE_MESSAGE = "after training is done"
# --exit-duration-in-mins counts from here, as Megatron-LM's from its _TRAIN_START_TIME (set when its
# training module is imported): model building and data loading are inside the budget the template
# derived from the job's time limit.
PROCESS_START = time.monotonic()


class Trainer:
    """One training run: model, optimiser, scheduler, data, checkpoints and Megatron-style logs."""

    def __init__(self, args: argparse.Namespace, rt: Runtime) -> None:
        self.args = args
        self.rt = rt
        seed_everything(args.seed)
        tokenizer = load_tokenizer(args.tokenizer_model)
        args.padded_vocab_size = padded_vocab_size(
            tokenizer.vocab_size, args.make_vocab_size_divisible_by, args.tensor_model_parallel_size
        )
        self.model = build_model(args, args.padded_vocab_size).to(rt.device)
        self.opt = build_optimizer(self.model, args)
        self.scheduler = build_scheduler(self.opt, args)
        self.train_ds, self.valid_ds, _ = build_datasets(args, tokenizer)
        self.mask = causal_mask(args.seq_length, rt.device)
        self.num_micro = args.global_batch_size // (args.micro_batch_size * rt.world_size)
        self.iteration = 0
        self.valid_consumed = 0
        self.last_saved: int | None = None
        # (iteration, loss, learning rate used) per step: what tests and benchmarks compare.
        self.history: list[tuple[int, float, float]] = []
        self.tb: Any = None
        if args.tensorboard_dir and rt.rank == 0:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(log_dir=args.tensorboard_dir, max_queue=100)

    # ---- one step -------------------------------------------------------------------------
    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with autocast(self.args, self.rt):
            per_token = self.model(batch["tokens"], batch["position_ids"], self.mask, labels=batch["labels"])
        mask = batch["loss_mask"].float()
        loss: torch.Tensor = (per_token.float() * mask).sum() / mask.sum().clamp(min=1.0)
        return loss

    def train_step(self) -> tuple[float, float, float]:
        """Forward/backward over the global batch, clip, AdamW step, scheduler step.

        Returns the loss, the gradient norm before clipping and the learning rate this step used.
        """
        args, rt = self.args, self.rt
        self.model.train()
        self.opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=rt.device)
        base = self.iteration * args.global_batch_size
        for m in range(self.num_micro):
            start = base + (m * rt.world_size + rt.rank) * args.micro_batch_size
            loss = self._loss(get_batch(self.train_ds, start, args.micro_batch_size, rt.device))
            (loss / self.num_micro).backward()
            total += loss.detach() / self.num_micro
        params = [p for p in self.model.parameters() if p.grad is not None]
        allreduce_mean([p.grad for p in params if p.grad is not None] + [total], rt)
        max_norm = args.clip_grad if args.clip_grad > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        lr_used = float(self.opt.param_groups[0]["lr"])
        self.opt.step()
        self.scheduler.step(increment=args.global_batch_size)
        self.iteration += 1
        return float(total.item()), float(grad_norm.item()), lr_used

    @torch.no_grad()
    def evaluate(self) -> float | None:
        """Mean loss over ``--eval-iters`` global batches of the validation split."""
        if self.valid_ds is None or self.args.eval_iters <= 0:
            return None
        args, rt = self.args, self.rt
        self.model.eval()
        total = torch.zeros((), device=rt.device)
        for _ in range(args.eval_iters):
            for m in range(self.num_micro):
                start = self.valid_consumed + (m * rt.world_size + rt.rank) * args.micro_batch_size
                total += self._loss(get_batch(self.valid_ds, start, args.micro_batch_size, rt.device))
            self.valid_consumed += args.global_batch_size
        total /= args.eval_iters * self.num_micro
        allreduce_mean([total], rt)
        return float(total.item())

    # ---- logging ------------------------------------------------------------------------------
    def log_iteration(self, loss: float, grad_norm: float, ms_per_iter: float) -> None:
        args = self.args
        lr = self.opt.param_groups[0]["lr"]
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        say(
            self.rt,
            f" [{stamp}] iteration {self.iteration:8d}/{args.train_iters:8d} |"
            f" consumed samples: {self.iteration * args.global_batch_size:12d} |"
            f" elapsed time per iteration (ms): {ms_per_iter:.1f} |"
            f" learning rate: {lr:.6E} | global batch size: {args.global_batch_size:5d} |"
            f" lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {grad_norm:.3f} |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |",
        )
        if self.tb is not None:
            self.tb.add_scalar("lm loss", loss, self.iteration)
            self.tb.add_scalar("learning-rate", lr, self.iteration)
            self.tb.add_scalar("grad-norm", grad_norm, self.iteration)
            self.tb.add_scalar("iteration-time", ms_per_iter / 1000.0, self.iteration)

    def log_validation(self, loss: float) -> None:
        ppl = math.exp(min(20.0, loss))
        line = (
            f" validation loss at iteration {self.iteration} | lm loss value: {loss:.6E} |"
            f" lm loss PPL: {ppl:.6E} | "
        )
        say(self.rt, "-" * len(line))
        say(self.rt, line)
        say(self.rt, "-" * len(line))
        if self.tb is not None:
            self.tb.add_scalar("lm loss validation", loss, self.iteration)
            self.tb.add_scalar("lm loss validation ppl", ppl, self.iteration)

    # ---- checkpoints ----------------------------------------------------------------------
    def save(self) -> None:
        if not self.args.save or self.last_saved == self.iteration:
            return
        t0 = time.perf_counter()
        path = save_checkpoint(
            Path(self.args.save),
            self.iteration,
            self.model,
            self.opt,
            self.scheduler,
            self.args,
            self.args.ckpt_format,
        )
        self.last_saved = self.iteration
        say(
            self.rt,
            f"  successfully saved checkpoint from iteration {self.iteration:7d} to {path} "
            f"[ t {time.perf_counter() - t0:.2f}s ]",
        )

    def load(self) -> None:
        if not self.args.load:
            return
        loaded = load_checkpoint(Path(self.args.load), self.model, self.opt, self.scheduler, self.args)
        if loaded is None:
            tracker = Path(self.args.load) / "latest_checkpointed_iteration.txt"
            say(self.rt, f"WARNING: could not find the metadata file {tracker}")
            say(self.rt, "    will not load any checkpoints and will start from random")
            return
        self.iteration = loaded.iteration
        self.last_saved = loaded.iteration if Path(self.args.load) == Path(self.args.save or "") else None
        # Validation resumes where an uninterrupted run would be.
        evals_done = self.iteration // self.args.eval_interval
        self.valid_consumed = evals_done * self.args.eval_iters * self.args.global_batch_size
        say(
            self.rt,
            f"  successfully loaded checkpoint from {loaded.path} [ t 1/1, p 1/1 ]"
            f" at iteration {self.iteration}",
        )

    # ---- the loop -------------------------------------------------------------------------
    def train(self) -> int:
        args, rt = self.args, self.rt
        self.load()
        interval_loss, interval_norm, interval_n = 0.0, 0.0, 0
        t_last = time.perf_counter()
        while self.iteration < args.train_iters:
            loss, norm, lr_used = self.train_step()
            self.history.append((self.iteration, loss, lr_used))
            interval_loss += loss
            interval_norm += norm
            interval_n += 1
            if self.iteration % args.log_interval == 0:
                ms = (time.perf_counter() - t_last) * 1000.0 / interval_n
                self.log_iteration(interval_loss / interval_n, interval_norm / interval_n, ms)
                interval_loss, interval_norm, interval_n = 0.0, 0.0, 0
                t_last = time.perf_counter()
            if args.eval_interval and self.iteration % args.eval_interval == 0:
                val = self.evaluate()
                if val is not None:
                    self.log_validation(val)
            if args.save_interval and self.iteration % args.save_interval == 0:
                self.save()
            stop = None
            if rt.stop_signal:
                stop = f"exiting program after receiving signal {rt.stop_signal[0]}."
            elif (
                args.exit_duration_in_mins is not None
                and (time.monotonic() - PROCESS_START) / 60 > args.exit_duration_in_mins
            ):
                stop = f"exiting program after {args.exit_duration_in_mins} minutes"
            elif args.exit_interval and self.iteration % args.exit_interval == 0:
                stop = f"exiting program at iteration {self.iteration}"
            if any_rank(stop is not None, rt) and self.iteration < args.train_iters:
                self.save()
                say(rt, stop or "exiting program (another rank asked to stop)")
                return 0
        self.save()
        if self.tb is not None:
            self.tb.flush()
        # Printed only once the final checkpoint is on disk (Megatron-LM prints it before saving).
        say(rt, f"[{datetime.now():%Y-%m-%d %H:%M:%S}] {DONE_MESSAGE}")
        return 0


def install_signal_handlers(rt: Runtime) -> None:
    """SIGTERM/SIGUSR1 finish the current step, save and exit 0 (Megatron-LM's --exit-signal-handler).

    Slurm sends SIGTERM at the time limit (then SIGKILL after KillWait): the checkpoint survives.
    """

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        rt.stop_signal.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGUSR1, on_signal)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python pretrain_gpt.py <megatron args>`` or under torchrun."""
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout
    )
    warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex|APEX).*")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv), world_size=world)
    except ArgumentError as exc:
        print(f"pretrain_gpt.py: error: {exc}", file=sys.stderr)
        return 2
    rt = init_runtime(args)
    install_signal_handlers(rt)
    try:
        return Trainer(args, rt).train()
    except UnsafeCheckpointError as exc:
        print(f"pretrain_gpt.py: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
