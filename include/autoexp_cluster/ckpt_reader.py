"""Read a Megatron checkpoint (torch_dist or legacy torch) into per-layer tensors with canonical names."""

from __future__ import annotations

import argparse
import pickle
import re
from dataclasses import dataclass
from pathlib import Path

import torch


class CheckpointError(Exception):
    """A checkpoint that cannot be read; ``str()`` is one line naming the path."""


# Transformer-Engine names (always used by torch_dist, and by legacy checkpoints of the TE spec) ->
# the local-spec names this module uses throughout.
_TE_TO_LOCAL = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "self_attention.linear_qkv.layer_norm_bias": "input_layernorm.bias",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
    "mlp.linear_fc1.layer_norm_bias": "pre_mlp_layernorm.bias",
}
_LAYER_KEY = re.compile(r"^decoder\.layers\.(\d+)\.(.+)$")


@dataclass
class MegatronCheckpoint:
    """A checkpoint's model tensors and saved Megatron arguments.

    Tensors are keyed ``embedding.*``, ``decoder.layers.{i}.<local-spec name>``,
    ``decoder.final_layernorm.*`` and ``output_layer.weight`` whatever the on-disk format.
    """

    args: argparse.Namespace
    tensors: dict[str, torch.Tensor]
    iteration: int
    fmt: str


def _canonical_layer_key(rest: str) -> str:
    return _TE_TO_LOCAL.get(rest, rest)


def _read_torch_dist(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    # Public torch API, no megatron and no process group: only model tensors are materialised.
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = FileSystemReader(str(path))
    meta = reader.read_metadata()
    wanted = {
        key: torch.empty(m.size, dtype=m.properties.dtype)
        for key, m in meta.state_dict_metadata.items()
        if isinstance(m, TensorStorageMetadata)
        and not key.startswith("optimizer.")
        and "_extra_state" not in key
    }
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    dcp_load(wanted, storage_reader=reader, no_dist=True)
    # weights_only=False: common.pt holds the argparse.Namespace of the run.
    common = torch.load(path / "common.pt", map_location="cpu", weights_only=False)
    tensors: dict[str, torch.Tensor] = {}
    for key, value in wanted.items():
        if key.startswith("decoder.layers."):
            # torch_dist stacks every layer's tensor on a leading axis.
            rest = _canonical_layer_key(key[len("decoder.layers.") :])
            for i in range(value.shape[0]):
                tensors[f"decoder.layers.{i}.{rest}"] = value[i]
        else:
            tensors[key] = value
    return tensors, common


def _read_legacy(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    ranks = sorted(p.name for p in path.glob("mp_rank_*") if (p / "model_optim_rng.pt").is_file())
    if len(ranks) != 1:
        raise CheckpointError(
            f"{path}: legacy checkpoint with {len(ranks)} model-parallel ranks ({', '.join(ranks)}); "
            "only TP=PP=1 is supported for the legacy format (torch_dist checkpoints of any TP/PP are)"
        )
    state = torch.load(path / ranks[0] / "model_optim_rng.pt", map_location="cpu", weights_only=False)
    model = state.get("model")
    if model is None and "model0" in state:
        model = state["model0"]
    if not isinstance(model, dict):
        raise CheckpointError(f"{path / ranks[0]}/model_optim_rng.pt: no 'model' state dict")
    tensors: dict[str, torch.Tensor] = {}
    for key, value in model.items():
        if "_extra_state" in key or not torch.is_tensor(value):
            continue
        m = _LAYER_KEY.match(key)
        tensors[f"decoder.layers.{m.group(1)}.{_canonical_layer_key(m.group(2))}" if m else key] = value
    return tensors, state


def read_checkpoint(path: Path) -> MegatronCheckpoint:
    """Read ``path`` (an ``iter_%07d`` dir, or a checkpoints dir with a tracker) in either format."""
    tracker = path / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        it = tracker.read_text().strip()
        path = path / ("release" if it == "release" else f"iter_{int(it):07d}")
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory does not exist")
    try:
        if (path / "metadata.json").is_file():
            fmt = "torch_dist"
            tensors, common = _read_torch_dist(path)
        elif any(path.glob("mp_rank_*/model_optim_rng.pt")):
            fmt = "torch"
            tensors, common = _read_legacy(path)
        else:
            raise CheckpointError(
                f"{path}: neither torch_dist (metadata.json) nor legacy (mp_rank_*/model_optim_rng.pt)"
            )
    except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        raise CheckpointError(f"{path}: unreadable {type(exc).__name__}: {exc}") from exc
    args = common.get("args")
    if not isinstance(args, argparse.Namespace):
        raise CheckpointError(f"{path}: no Megatron 'args' saved in the checkpoint")
    iteration = int(common.get("iteration", 0))  # type: ignore[call-overload]
    return MegatronCheckpoint(args=args, tensors=tensors, iteration=iteration, fmt=fmt)
