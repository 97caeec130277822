"""Trainer: bitwise resume, megatron-core's LR schedule at every iteration, signals, the CLI log."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from autoexp_cluster.megatron_args import parse_args

from tests.autoexp_cluster.conftest import DemoData, TrainedRun, tiny_argv

pytestmark = pytest.mark.ml


def _trainer(argv: list[str], rt: Any) -> Any:
    from autoexp_cluster.trainer import Trainer

    return Trainer(parse_args(argv), rt)


def _params(trainer: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items() if torch.is_tensor(v)}


@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
def test_resume_reproduces_uninterrupted_run_bitwise(
    fmt: str, demo_data: DemoData, megatron_runtime: Any, tmp_path: Path
) -> None:
    # Dropout stays on (Megatron's default 0.1): the RNG state must round-trip through the checkpoint.
    extra = ["--ckpt-format", fmt, "--save-interval", "6", "--lr-decay-style", "cosine"]
    full = _trainer(tiny_argv(demo_data, tmp_path / "full", *extra), megatron_runtime)
    assert full.train() == 0

    first = _trainer(
        tiny_argv(demo_data, tmp_path / "split", *extra, "--exit-interval", "6"), megatron_runtime
    )
    assert first.train() == 0
    assert first.iteration == 6
    assert (tmp_path / "split" / "latest_checkpointed_iteration.txt").read_text().strip() == "6"
    second = _trainer(tiny_argv(demo_data, tmp_path / "split", *extra), megatron_runtime)
    assert second.train() == 0

    assert [h[0] for h in second.history] == list(range(7, 13))
    assert second.history == full.history[6:]  # losses and learning rates, exactly
    for key, value in _params(full).items():
        assert torch.equal(value, _params(second)[key]), key


def _expected_lrs(argv: list[str], start_iter: int, n: int) -> list[float]:
    """LR per iteration from a fresh megatron-core OptimizerParamScheduler stepped as Megatron-LM does."""
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    a = parse_args(argv)
    gbs = a.global_batch_size
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=a.lr, min_lr=a.min_lr, lr_warmup_steps=a.lr_warmup_iters * gbs,
        lr_decay_steps=a.lr_decay_iters * gbs, lr_decay_style=a.lr_decay_style, start_wd=0.01, end_wd=0.01,
        wd_incr_steps=a.train_iters * gbs, wd_incr_style="constant",
        use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=True,
        wsd_decay_steps=None if a.lr_wsd_decay_iters is None else a.lr_wsd_decay_iters * gbs,
        lr_wsd_decay_style=a.lr_wsd_decay_style,
    )  # fmt: skip
    sched.step(start_iter * gbs)
    lrs = []
    for _ in range(n):
        lrs.append(opt.param_groups[0]["lr"])
        sched.step(gbs)
    return lrs


def test_lr_schedule_is_megatron_cores_including_cooldown_branch(
    demo_data: DemoData, megatron_runtime: Any, tmp_path: Path
) -> None:
    run = tmp_path / "ckpt"
    pre = tiny_argv(demo_data, run, "--lr-decay-style", "WSD", "--lr-wsd-decay-style", "linear",
                    "--lr-warmup-iters", "3", "--lr-decay-iters", "9", "--lr-wsd-decay-iters", "0",
                    "--save-interval", "6", "--ckpt-format", "torch", train_iters=6)  # fmt: skip
    trainer = _trainer(pre, megatron_runtime)
    trainer.train()
    assert [h[2] for h in trainer.history] == _expected_lrs(pre, 0, 6)

    # Cooldown as the seed runs it: same dir, no warmup, a new WSD schedule overriding the saved one.
    cd = tiny_argv(demo_data, run, "--lr-decay-style", "WSD", "--lr-wsd-decay-style", "linear",
                   "--lr-warmup-iters", "0", "--lr-decay-iters", "14", "--lr-wsd-decay-iters", "4",
                   "--override-opt_param-scheduler", "--ckpt-format", "torch", train_iters=14)  # fmt: skip
    cooldown = _trainer(cd, megatron_runtime)
    cooldown.train()
    assert cooldown.history[0][0] == 7
    assert [h[2] for h in cooldown.history] == _expected_lrs(cd, 6, 8)
    assert cooldown.opt.param_groups[0]["lr"] == pytest.approx(1e-4)  # min-lr after the last step


def test_sigterm_saves_and_exits_zero(demo_data: DemoData, megatron_runtime: Any, tmp_path: Path) -> None:
    from autoexp_cluster.trainer import install_signal_handlers

    previous = signal.getsignal(signal.SIGTERM)
    trainer = _trainer(tiny_argv(demo_data, tmp_path / "ckpt", "--ckpt-format", "torch"), megatron_runtime)
    megatron_runtime.stop_signal.clear()
    install_signal_handlers(megatron_runtime)
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # a real signal, delivered to the handler
        assert trainer.train() == 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        megatron_runtime.stop_signal.clear()
    assert trainer.iteration == 1
    assert (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (tmp_path / "ckpt" / "iter_0000001" / "mp_rank_00" / "model_optim_rng.pt").stat().st_size > 0


def test_cli_run_logs_megatron_format_and_saves_before_done(trained_run: TrainedRun) -> None:
    log = trained_run.log
    assert re.search(r"iteration\s+60/\s+60 \| consumed samples:\s+960 \|.*\| lm loss: [0-9.E+-]+ \|", log)
    assert "validation loss at iteration 60 | lm loss value:" in log
    assert "ignoring Megatron-LM flags" in log
    assert "--use-flash-attn" in log
    losses = [float(x) for x in re.findall(r"\| lm loss: ([0-9.E+-]+) \|", log)]
    assert losses[-1] < losses[0] - 1.0, losses
    # "after training is done" only once the last checkpoint is on disk (the seed's Megatron: before).
    assert log.index("saved checkpoint from iteration      60") < log.index("after training is done")
    ckpts = trained_run.checkpoints
    assert sorted(p.name for p in ckpts.glob("iter_*")) == [f"iter_{i:07d}" for i in (15, 30, 45, 60)]
    assert (ckpts / "latest_checkpointed_iteration.txt").read_text().strip() == "60"
    assert not list(ckpts.glob(".*tmp*")), "temporary save dirs left behind"


def test_unknown_flag_is_a_one_line_error(demo_data: DemoData, tmp_path: Path) -> None:
    from tests.autoexp_cluster.conftest import run_trainer_cli

    proc = run_trainer_cli([*tiny_argv(demo_data, None), "--no-such-flag"], tmp_path / "log", timeout=120)
    assert proc.returncode == 2
    assert re.search(r"^pretrain_gpt\.py: error: unrecognized arguments: --no-such-flag$", proc.stderr, re.M)
    assert "Traceback" not in proc.stderr
