"""Converter time vs the floor: ``torch.load`` of the same checkpoint + safetensors save of its tensors."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from autoexp_cluster.checkpointing import save_checkpoint  # noqa: E402
from autoexp_cluster.convert import convert  # noqa: E402
from autoexp_cluster.megatron_args import parse_args  # noqa: E402
from autoexp_cluster.model import build_model  # noqa: E402
from autoexp_cluster.optimizer import build_optimizer, build_scheduler  # noqa: E402
from autoexp_cluster.runtime import init_runtime  # noqa: E402
from autoexp_cluster.safe_pickle import torch_load  # noqa: E402

# The seed's 25M shape (9 layers, h288, 4 heads, ffn 1152) with its architecture flags.
ARGV = [
    "--num-layers", "9", "--hidden-size", "288", "--num-attention-heads", "4", "--ffn-hidden-size", "1152",
    "--seq-length", "256", "--micro-batch-size", "1", "--train-iters", "1", "--lr", "1e-3",
    "--data-path", "x", "--tokenizer-model", "", "--qk-layernorm", "--position-embedding-type", "rope",
    "--rotary-base", "100000", "--normalization", "RMSNorm", "--swiglu",
]  # fmt: skip
REPEATS = 5


def main() -> int:
    args = parse_args(ARGV)
    args.padded_vocab_size = 50304
    init_runtime(args)
    model = build_model(args, args.padded_vocab_size)
    opt = build_optimizer(model, args)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / "ckpt"
        save_checkpoint(ckpt, 1, model, opt, build_scheduler(opt, args), args, "torch")
        pt = ckpt / "iter_0000001" / "mp_rank_00" / "model_optim_rng.pt"
        convert(ckpt, Path(tmp) / "warm")  # imports and page cache
        ours, floor, safe, unsafe = [], [], [], []
        for i in range(REPEATS):
            # The allow-listed load (weights_only + placeholders) vs an unrestricted torch.load.
            t0 = time.perf_counter()
            torch_load(pt)
            safe.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            torch.load(pt, map_location="cpu", weights_only=False)
            unsafe.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            convert(ckpt, Path(tmp) / f"hf{i}")
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            state = torch.load(pt, map_location="cpu", weights_only=False)
            tensors = {k: v.contiguous() for k, v in state["model"].items() if torch.is_tensor(v)}
            save_file(tensors, str(Path(tmp) / f"floor{i}.safetensors"))
            floor.append(time.perf_counter() - t0)
    n_params = sum(p.numel() for p in model.parameters())
    ratio = statistics.median(ours) / statistics.median(floor)
    print(f"model: {n_params / 1e6:.1f}M params, legacy checkpoint {pt.name}")
    print(f"convert (median of {REPEATS}): {statistics.median(ours) * 1000:.0f} ms")
    print(f"torch.load + safetensors save (median of {REPEATS}): {statistics.median(floor) * 1000:.0f} ms")
    print(f"ratio: {ratio:.2f}x (target <= 1.3x)")
    load_ratio = statistics.median(safe) / statistics.median(unsafe)
    print(
        f"allow-listed load {statistics.median(safe) * 1000:.0f} ms vs unrestricted "
        f"{statistics.median(unsafe) * 1000:.0f} ms (median of {REPEATS}): {load_ratio:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
