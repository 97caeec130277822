"""Tokenizer and datasets through megatron-core's own pipeline (IndexedDataset + GPTDataset)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch


def load_tokenizer(path: str) -> Any:
    """Megatron-LM's ``HuggingFaceTokenizer`` on a local tokenizer directory (no downloads)."""
    from megatron.core.tokenizers import MegatronTokenizer

    return MegatronTokenizer.from_pretrained(tokenizer_path=path, metadata_path={"library": "huggingface"})


def parse_blend(data_path: Sequence[str]) -> tuple[list[str], list[float] | None]:
    """``--data-path P`` or ``--data-path W1 P1 W2 P2`` into megatron's blend tuple."""
    if len(data_path) == 1:
        return [data_path[0]], None
    if len(data_path) % 2:
        raise ValueError(f"--data-path with weights needs pairs 'WEIGHT PREFIX', got {' '.join(data_path)}")
    weights = [float(w) for w in data_path[0::2]]
    return list(data_path[1::2]), weights


def build_datasets(args: argparse.Namespace, tokenizer: Any) -> tuple[Any, Any, Any]:
    """Train/valid/test GPTDatasets sized as Megatron-LM sizes them."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

    gbs = args.global_batch_size
    eval_runs = args.train_iters // args.eval_interval + 1
    sizes = [args.train_iters * gbs, eval_runs * args.eval_iters * gbs, args.eval_iters * gbs]
    config = GPTDatasetConfig(
        random_seed=args.seed,
        sequence_length=args.seq_length,
        blend=parse_blend(args.data_path),
        split=args.split,
        tokenizer=tokenizer,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        path_to_cache=args.data_cache_path,
        mid_level_dataset_surplus=0.005,
    )
    train, valid, test = BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, config).build()
    return train, valid, test


def get_batch(dataset: Any, start: int, count: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Samples ``start .. start+count-1`` (modulo the dataset length) stacked into a micro-batch."""
    n = len(dataset)
    samples = [dataset[(start + k) % n] for k in range(count)]
    out: dict[str, torch.Tensor] = {}
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        out[key] = torch.stack([torch.as_tensor(np.asarray(s[key])) for s in samples]).to(device)
    return out
