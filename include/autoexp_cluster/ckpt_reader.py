"""Read a Megatron checkpoint (torch_dist or legacy torch) into per-layer tensors with canonical names."""

from __future__ import annotations

import argparse
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

from autoexp_cluster.safe_pickle import UnsafeCheckpointError, load_dcp_metadata, torch_load


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
    source: Path  # the file the args were read from (named in messages about them)


def _canonical_layer_key(rest: str) -> str:
    return _TE_TO_LOCAL.get(rest, rest)


class _SafeFileSystemReader(FileSystemReader):
    """FileSystemReader whose ``.metadata`` (a plain pickle) goes through the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        metadata = load_dcp_metadata(Path(self.path) / ".metadata")
        if not isinstance(metadata, Metadata):
            raise UnsafeCheckpointError(
                f"{self.path}/.metadata: holds {type(metadata).__name__}, not Metadata"
            )
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        return metadata


def _read_torch_dist(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, object]]:
    # Public torch API, no megatron and no process group: only model tensors are materialised.
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = _SafeFileSystemReader(str(path))
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
    common = torch_load(path / "common.pt")
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
    state = torch_load(path / ranks[0] / "model_optim_rng.pt")
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
    except UnsafeCheckpointError as exc:
        raise CheckpointError(str(exc)) from exc
    except (
        OSError,
        RuntimeError,
        ValueError,
        EOFError,
        pickle.UnpicklingError,
        ImportError,
        AttributeError,
    ) as exc:
        raise CheckpointError(f"{path}: unreadable {type(exc).__name__}: {_one_line(exc)}") from exc
    source = path / "common.pt" if fmt == "torch_dist" else next(path.glob("mp_rank_*/model_optim_rng.pt"))
    args = common.get("args") if isinstance(common, dict) else None
    if not isinstance(args, argparse.Namespace):
        raise CheckpointError(
            f"{source}: no Megatron 'args' saved in the checkpoint (found {type(args).__name__})"
        )
    iteration = common.get("iteration", 0)
    if not isinstance(iteration, int):
        raise CheckpointError(f"{source}: field 'iteration' holds {iteration!r}, not an integer")
    return MegatronCheckpoint(args=args, tensors=tensors, iteration=iteration, fmt=fmt, source=source)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
