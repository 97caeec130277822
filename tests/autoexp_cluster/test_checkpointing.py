"""The trainer's resume reads Megatron-LM checkpoints whose args hold classes this environment lacks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.autoexp_cluster.conftest import BASE, megatron_checkpoint
from tests.autoexp_cluster.test_ckpt_reader import FORMATS, args_file, megatron_lm_classes, rewrite

pytestmark = pytest.mark.ml


@pytest.mark.parametrize("fmt", FORMATS)
def test_resume_reads_args_with_absent_modules_and_unknown_enum_members(
    fmt: str, megatron_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autoexp_cluster.checkpointing import load_checkpoint
    from autoexp_cluster.megatron_args import parse_args
    from autoexp_cluster.model import build_model
    from autoexp_cluster.optimizer import build_optimizer, build_scheduler

    saved = megatron_checkpoint([], fmt, tmp_path / "ckpt")
    with megatron_lm_classes(monkeypatch) as objs:

        def add_foreign(state: dict[str, Any]) -> None:
            state["args"].attention_backend = objs.backend  # a member megatron-core 0.16 lacks
            state["args"].training_extras = objs.extras  # megatron.training: not installed

        rewrite(args_file(tmp_path / "ckpt", fmt), add_foreign)
    args = parse_args(BASE)
    model = build_model(args, 128)  # fresh weights: the load must replace them
    opt = build_optimizer(model, args)
    loaded = load_checkpoint(tmp_path / "ckpt", model, opt, build_scheduler(opt, args), args)
    assert loaded is not None
    assert loaded.iteration == 1
    assert loaded.fmt == fmt
    want = {k: v for k, v in saved.state_dict().items() if torch.is_tensor(v)}
    got = model.state_dict()
    assert want
    assert all(torch.equal(got[k], v) for k, v in want.items())
