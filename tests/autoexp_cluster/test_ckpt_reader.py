"""Checkpoints as Megatron-LM writes them: foreign classes in the saved args, Transformer-Engine names."""

from __future__ import annotations

import enum
import io
import json
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from autoexp_cluster.convert import ConversionError, convert

from tests.autoexp_cluster.conftest import ROPE_RMS_SWIGLU, max_logit_error, megatron_checkpoint

pytestmark = pytest.mark.ml

SEED_WITH_BIAS = [*ROPE_RMS_SWIGLU, "--qk-layernorm", "--rotary-base", "100000"]
FORMATS = ["torch", "torch_dist"]


def args_file(ckpt: Path, fmt: str) -> Path:
    it = ckpt / "iter_0000001"
    return it / "common.pt" if fmt == "torch_dist" else it / "mp_rank_00" / "model_optim_rng.pt"


def rewrite(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edit a checkpoint file this test wrote itself (trusted: plain torch.load)."""
    state = torch.load(path, map_location="cpu", weights_only=False)
    edit(state)
    torch.save(state, path)


@contextmanager
def megatron_lm_classes(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.SimpleNamespace]:
    """Classes named like Megatron-LM's, present only while the test pickles them.

    A real Megatron-LM run pickles ``args`` holding objects of ``megatron.training`` (absent from a
    megatron-core-only environment) and megatron-core enums; a newer megatron-core adds enum members
    an older one lacks (pickles name an enum member by value). Both are reproduced here: a module
    ``megatron.training.arguments`` that exists only in ``sys.modules`` during the save, and an
    ``AttnBackend`` with a value the installed megatron-core does not have.
    """
    from megatron.core.transformer import enums

    mod = types.ModuleType("megatron.training.arguments")

    class RecomputeGranularity(enum.Enum):
        selective = "selective"

    class TrainingExtras:
        def __init__(self) -> None:
            self.straggler_detector = True
            self.ranks = [0, 1]

    class AttnBackend(enum.Enum):
        flash_v9 = 99  # not a member of the installed megatron-core's AttnBackend

    for cls, module in ((RecomputeGranularity, mod), (TrainingExtras, mod), (AttnBackend, enums)):
        cls.__module__ = module.__name__
        cls.__qualname__ = cls.__name__
        monkeypatch.setattr(module, cls.__name__, cls, raising=False)
    monkeypatch.setitem(sys.modules, "megatron.training", types.ModuleType("megatron.training"))
    monkeypatch.setitem(sys.modules, "megatron.training.arguments", mod)
    try:
        yield types.SimpleNamespace(
            granularity=RecomputeGranularity.selective, extras=TrainingExtras(), backend=AttnBackend.flash_v9
        )
    finally:
        monkeypatch.undo()


@pytest.mark.parametrize("fmt", FORMATS)
def test_args_with_absent_modules_and_unknown_enum_members_convert_exactly(
    fmt: str, megatron_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = megatron_checkpoint(SEED_WITH_BIAS, fmt, tmp_path / "ckpt")
    path = args_file(tmp_path / "ckpt", fmt)
    with megatron_lm_classes(monkeypatch) as objs:

        def add_foreign(state: dict[str, Any]) -> None:
            state["args"].recompute_granularity = objs.granularity
            state["args"].training_extras = objs.extras
            state["args"].attention_backend = objs.backend
            state["args"].params_dtype = torch.bfloat16

        rewrite(path, add_foreign)
    # The file really carries what an environment without Megatron-LM cannot unpickle.
    with pytest.raises((ModuleNotFoundError, ValueError)):
        torch.load(path, map_location="cpu", weights_only=False)

    assert convert(tmp_path / "ckpt", tmp_path / "hf") == "autoexp_llama"
    assert max_logit_error(model, tmp_path / "hf") <= 1e-4


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_needed_field_holding_a_foreign_object_is_one_line_naming_file_and_field(
    fmt: str, megatron_runtime: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    megatron_checkpoint(SEED_WITH_BIAS, fmt, tmp_path / "ckpt")
    path = args_file(tmp_path / "ckpt", fmt)
    with megatron_lm_classes(monkeypatch) as objs:
        rewrite(path, lambda state: setattr(state["args"], "normalization", objs.granularity))
    with pytest.raises(ConversionError) as err:
        convert(tmp_path / "ckpt", tmp_path / "hf")
    assert str(err.value) == (
        f"{path}: field args.normalization holds megatron.training.arguments.RecomputeGranularity"
        "('selective'), which the converter cannot read"
    )
    assert not (tmp_path / "hf").exists()


LOCAL_TO_TE = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}
EXTRA_STATE: dict[str, Callable[[], Any] | None] = {
    "bytes": lambda: b"\x00te-fp8-meta",
    "tensor": lambda: torch.arange(4, dtype=torch.uint8),
    "bytesio": lambda: io.BytesIO(b"te<1.0 fp8 meta"),  # older TE pickled a BytesIO
    "absent": None,
}
TE_MODULES = ("self_attention.linear_qkv", "self_attention.linear_proj", "mlp.linear_fc1", "mlp.linear_fc2")


def te_named(model: dict[str, Any], extra: Callable[[], Any] | None) -> dict[str, Any]:
    """The legacy model state dict renamed as the Transformer-Engine spec saves it."""
    out: dict[str, Any] = {}
    for key, value in model.items():
        if "_extra_state" in key:
            continue
        prefix, _, rest = key.partition(".layers.")
        layer, _, name = rest.partition(".")
        out[f"{prefix}.layers.{layer}.{LOCAL_TO_TE.get(name, name)}" if rest else key] = value
    layers = {k.split(".")[2] for k in out if k.startswith("decoder.layers.")}
    for i in layers if extra else ():
        for module in TE_MODULES:
            out[f"decoder.layers.{i}.{module}._extra_state"] = extra()  # type: ignore[misc]
    return out


def write_torch_dist(legacy_iter: Path, out: Path, extra: Callable[[], Any] | None) -> None:
    """A torch_dist folder (layers stacked on a leading axis, as megatron-core saves them)."""
    import torch.distributed.checkpoint as dcp

    state = torch.load(legacy_iter / "mp_rank_00" / "model_optim_rng.pt", weights_only=False)
    model = te_named(state["model"], None)
    sharded: dict[str, Any] = {k: v for k, v in model.items() if not k.startswith("decoder.layers.")}
    names = sorted({k.split(".", 3)[3] for k in model if k.startswith("decoder.layers.")})
    n = 1 + max(int(k.split(".")[2]) for k in model if k.startswith("decoder.layers."))
    for name in names:
        sharded[f"decoder.layers.{name}"] = torch.stack(
            [model[f"decoder.layers.{i}.{name}"] for i in range(n)]
        )
    for module in TE_MODULES if extra else ():
        value = extra()  # type: ignore[misc]
        key = f"decoder.layers.{module}._extra_state"
        sharded[key if torch.is_tensor(value) else f"{key}/shard_0_1"] = value
    dcp.save(sharded, storage_writer=dcp.FileSystemWriter(str(out)), no_dist=True)
    torch.save({"args": state["args"], "iteration": 1}, out / "common.pt")
    (out / "metadata.json").write_text(
        json.dumps({"sharded_backend": "torch_dist", "common_backend": "torch"})
    )


@pytest.mark.parametrize("extra", list(EXTRA_STATE))
@pytest.mark.parametrize("fmt", FORMATS)
def test_transformer_engine_names_convert_exactly(
    fmt: str, extra: str, megatron_runtime: Any, tmp_path: Path
) -> None:
    model = megatron_checkpoint(SEED_WITH_BIAS, "torch", tmp_path / "local")
    legacy_iter = tmp_path / "local" / "iter_0000001"
    make = EXTRA_STATE[extra]
    if fmt == "torch":
        rewrite(
            legacy_iter / "mp_rank_00" / "model_optim_rng.pt",
            lambda s: s.update(model=te_named(s["model"], make)),
        )
        source = legacy_iter
    else:
        source = tmp_path / "te_dist" / "iter_0000001"
        write_torch_dist(legacy_iter, source, make)
    assert convert(source, tmp_path / "hf") == "autoexp_llama"
    assert max_logit_error(model, tmp_path / "hf") <= 1e-4
