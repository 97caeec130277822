"""Every export checked: the converter compares the written HF model's logits with megatron-core's."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from autoexp_cluster import convert as convert_module
from autoexp_cluster.convert import convert, main
from autoexp_cluster.export_check import tolerance_for

from tests.autoexp_cluster.conftest import (
    BASE,
    ROPE_RMS_SWIGLU,
    SEED_ARCH,
    max_logit_error,
    megatron_checkpoint,
)
from tests.fixtures.megatron_checkpoints import generate_parallel

pytestmark = pytest.mark.ml


def _logit_check(hf_dir: Path) -> dict[str, Any]:
    check: dict[str, Any] = json.loads((hf_dir / "config.json").read_text())["autoexp"]["logit_check"]
    return check


def test_the_check_is_recorded_in_the_exports_config(megatron_runtime: Any, tmp_path: Path) -> None:
    megatron_checkpoint(ROPE_RMS_SWIGLU, "torch_dist", tmp_path / "ckpt")
    convert(tmp_path / "ckpt", tmp_path / "hf")
    check = _logit_check(tmp_path / "hf")
    assert check["passed"] is True
    assert check["dtype"] == "float32"
    assert check["tokens"] == [2, 16]
    assert 0 <= check["max_abs_diff"] <= 1e-4
    assert check["tolerance"] == pytest.approx(1e-4 * max(1.0, check["max_abs_logit"]))


def _swap_gate_and_up(monkeypatch: pytest.MonkeyPatch) -> None:
    # The classic GLU mistake: gate and up exchanged, in the mapping the converter writes.
    real = convert_module.map_tensors

    def swapped(t: dict[str, torch.Tensor], a: Any, family: str) -> dict[str, torch.Tensor]:
        out = real(t, a, family)
        for i in range(a.num_layers):
            gate, up = f"model.layers.{i}.mlp.gate_proj.weight", f"model.layers.{i}.mlp.up_proj.weight"
            out[gate], out[up] = out[up], out[gate]
        return out

    monkeypatch.setattr(convert_module, "map_tensors", swapped)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_export_whose_logits_differ_fails_in_one_line(
    dtype: str,
    megatron_runtime: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ckpt = tmp_path / "ckpt"
    megatron_checkpoint(ROPE_RMS_SWIGLU, "torch_dist", ckpt, dtype)
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "previous-export").write_text("kept")
    _swap_gate_and_up(monkeypatch)
    assert main(["--load", str(ckpt), "--save", str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    m = re.fullmatch(
        rf"convert: error: {re.escape(str(ckpt))}: exported logits differ from Megatron's: "
        rf"max \|logit diff\| (\S+) > tolerance (\S+) \({dtype}, max \|logit\| \S+, 2x16 tokens\); "
        rf"nothing written to {re.escape(str(tmp_path / 'hf'))}",
        err,
    )
    assert m, err
    assert float(m.group(1)) > float(m.group(2))
    assert [p.name for p in (tmp_path / "hf").iterdir()] == ["previous-export"]
    assert not (tmp_path / "hf.tmp").exists()


def test_no_logit_check_converts_unchecked(
    megatron_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    megatron_checkpoint(ROPE_RMS_SWIGLU, "torch", tmp_path / "ckpt")
    _swap_gate_and_up(monkeypatch)
    assert main(["--load", str(tmp_path / "ckpt"), "--save", str(tmp_path / "hf"), "--no-logit-check"]) == 0
    assert "logit_check" not in json.loads((tmp_path / "hf" / "config.json").read_text())["autoexp"]


def _megatron_tp1(argv: list[str], path: Path) -> Any:
    # The reference: megatron-core's own loader reshards the TP/PP checkpoint into a TP=PP=1 model,
    # independently of the converter's reader.
    from autoexp_cluster.megatron_args import parse_args
    from autoexp_cluster.model import build_model
    from autoexp_cluster.safe_pickle import allowed_for
    from megatron.core import dist_checkpointing

    model = build_model(parse_args(argv), 128)
    with allowed_for(path / "common.pt"):
        loaded = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(path))
    model.load_state_dict(loaded["model"])
    return model.eval()


@pytest.mark.parametrize(
    ("tp", "pp", "extra"),
    [
        pytest.param(2, 1, ["--group-query-attention", "--num-query-groups", "2",
                            "--untie-embeddings-and-output-weights"], id="tp2-gqa-untied"),
        pytest.param(1, 2, [], id="pp2-tied"),
    ],
)  # fmt: skip
def test_tensor_and_pipeline_parallel_checkpoints_convert_exactly(
    tp: int, pp: int, extra: list[str], megatron_runtime: Any, tmp_path: Path
) -> None:
    argv = [*BASE, *SEED_ARCH, *extra]
    generate_parallel(tmp_path / "ckpt", argv, tp, pp, timeout=600)
    reference = _megatron_tp1(argv, tmp_path / "ckpt" / "iter_0000001")
    assert convert(tmp_path / "ckpt", tmp_path / "hf") == "autoexp_llama"
    assert max_logit_error(reference, tmp_path / "hf") <= 1e-4
    assert _logit_check(tmp_path / "hf")["max_abs_diff"] <= 1e-4


def test_tolerances_scale_with_the_logits() -> None:
    assert tolerance_for(torch.float32, 0.5) == pytest.approx(1e-4)
    assert tolerance_for(torch.float32, 20.0) == pytest.approx(2e-3)
    assert tolerance_for(torch.bfloat16, 4.0) == pytest.approx(0.2)
