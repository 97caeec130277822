"""A checkpoint whose pickle would run code is refused with one line, by the converter and the trainer."""

from __future__ import annotations

import os
import pickle
import shlex
from pathlib import Path
from typing import Any

import pytest
import torch
from autoexp_cluster.convert import ConversionError, convert, main
from autoexp_cluster.safe_pickle import Placeholder, UnsafeCheckpointError, placeholder_for

from tests.autoexp_cluster.conftest import BASE, DemoData, megatron_checkpoint, run_trainer_cli, tiny_argv

pytestmark = pytest.mark.ml


class RunsShell:
    """Unpickling this calls ``os.system`` (the classic malicious-pickle payload)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


class Evals:
    """Unpickling this calls ``builtins.eval`` (a module torch does not block outright)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (eval, (f"open({str(self.marker)!r}, 'w').close()",))


PAYLOADS = {"os.system": RunsShell, "eval": Evals}
# (format, poisoned file) -- the args file of each format, and torch_dist's plain-pickle .metadata.
TARGETS = [
    ("torch", "mp_rank_00/model_optim_rng.pt"),
    ("torch_dist", "common.pt"),
    ("torch_dist", ".metadata"),
]


def poison(iter_dir: Path, name: str, payload: Any) -> Path:
    path = iter_dir / name
    if name == ".metadata":
        path.write_bytes(pickle.dumps(payload))
    else:
        state = torch.load(path, map_location="cpu", weights_only=False)  # written by this test
        state["args"].wandb_project = payload
        torch.save(state, path)
    return path


@pytest.mark.parametrize("payload", list(PAYLOADS))
@pytest.mark.parametrize(("fmt", "name"), TARGETS)
def test_converter_refuses_a_pickle_that_runs_code(
    fmt: str,
    name: str,
    payload: str,
    megatron_runtime: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    megatron_checkpoint([], fmt, tmp_path / "ckpt")
    marker = tmp_path / "pwned"
    path = poison(tmp_path / "ckpt" / "iter_0000001", name, PAYLOADS[payload](marker))
    with pytest.raises(ConversionError) as err:
        convert(tmp_path / "ckpt", tmp_path / "hf")
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: refused to load: ")
    assert ("system" if payload == "os.system" else "eval") in message
    assert main(["--load", str(tmp_path / "ckpt"), "--save", str(tmp_path / "hf")]) == 1
    assert capsys.readouterr().err == f"convert: error: {message}\n"
    assert not marker.exists()
    assert not (tmp_path / "hf").exists()


def test_the_payload_is_real(tmp_path: Path) -> None:
    # What the refusal prevents: an unrestricted load of the same bytes runs the command.
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(RunsShell(marker)))
    assert marker.exists()


@pytest.mark.parametrize(("fmt", "name"), TARGETS)
def test_trainer_resume_refuses_a_pickle_that_runs_code(
    fmt: str, name: str, megatron_runtime: Any, tmp_path: Path
) -> None:
    from autoexp_cluster.checkpointing import load_checkpoint
    from autoexp_cluster.megatron_args import parse_args
    from autoexp_cluster.model import build_model
    from autoexp_cluster.optimizer import build_optimizer, build_scheduler

    megatron_checkpoint([], fmt, tmp_path / "ckpt")
    marker = tmp_path / "pwned"
    path = poison(tmp_path / "ckpt" / "iter_0000001", name, RunsShell(marker))
    args = parse_args(BASE)
    model = build_model(args, 128)
    opt = build_optimizer(model, args)
    with pytest.raises(UnsafeCheckpointError) as err:
        load_checkpoint(tmp_path / "ckpt", model, opt, build_scheduler(opt, args), args)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(f"{path}: refused to load: ")
    assert not marker.exists()


def test_placeholders_are_inert_and_show_what_the_pickle_held() -> None:
    cls = placeholder_for("megatron.core.transformer.enums.AttnBackend")
    assert cls is placeholder_for("megatron.core.transformer.enums.AttnBackend")
    member = cls(99)
    member.__setstate__({"x": 1})
    assert isinstance(member, Placeholder)
    assert repr(member) == "megatron.core.transformer.enums.AttnBackend(99)"
    assert member.state == {"x": 1}


def test_trainer_cli_resume_of_a_poisoned_checkpoint_is_one_line_and_exit_1(
    demo_data: DemoData, megatron_runtime: Any, tmp_path: Path
) -> None:
    run = tmp_path / "run" / "checkpoints"
    megatron_checkpoint([], "torch", run)
    marker = tmp_path / "pwned"
    path = poison(run / "iter_0000001", "mp_rank_00/model_optim_rng.pt", RunsShell(marker))
    proc = run_trainer_cli(tiny_argv(demo_data, run), tmp_path / "train.log")
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("pretrain_gpt.py: error:")]
    assert len(errors) == 1
    assert errors[0].startswith(f"pretrain_gpt.py: error: {path}: refused to load: ")
    assert "system" in errors[0]
    assert "Traceback" not in proc.stderr
    assert not marker.exists()
