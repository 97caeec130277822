"""Trainer step time vs a bare megatron-core loop (same model, same batch shape, same optimiser)."""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "include"))

from autoexp_cluster.corpus import documents  # noqa: E402
from autoexp_cluster.megatron_args import parse_args  # noqa: E402
from autoexp_cluster.model import build_model, causal_mask  # noqa: E402
from autoexp_cluster.prepare_data import prepare  # noqa: E402
from autoexp_cluster.runtime import init_runtime, seed_everything  # noqa: E402
from autoexp_cluster.trainer import Trainer  # noqa: E402

STEPS = 30
WARMUP = 5


def argv(data: Path) -> list[str]:
    return [
        "--num-layers", "4", "--hidden-size", "128", "--num-attention-heads", "4", "--ffn-hidden-size", "512",
        "--seq-length", "128", "--micro-batch-size", "8", "--global-batch-size", "8",
        "--train-iters", str(STEPS + WARMUP), "--lr", "1e-3", "--clip-grad", "1.0", "--split", "98,1,1",
        "--data-path", str(data / "demo_text_document"), "--tokenizer-model", str(data / "tokenizer"),
        "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu", "--qk-layernorm",
        "--hidden-dropout", "0", "--attention-dropout", "0", "--eval-interval", "100000", "--eval-iters", "0",
    ]  # fmt: skip


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        prepare(data, list(documents(3000)), vocab_size=384)
        args = parse_args(argv(data))
        rt = init_runtime(args)
        trainer = Trainer(args, rt)

        # Bare loop: megatron-core GPTModel + AdamW on pre-built tensors (no data pipeline, no clip,
        # no scheduler, no logging): the floor the trainer's overhead is measured against.
        seed_everything(args.seed)
        bare = build_model(args, args.padded_vocab_size)
        bare_opt = torch.optim.AdamW(bare.parameters(), lr=1e-3)
        tokens = torch.randint(0, 384, (8, 128))
        pos = torch.arange(128).expand(8, 128)
        mask = causal_mask(128, torch.device("cpu"))

        def bare_step() -> None:
            bare_opt.zero_grad(set_to_none=True)
            loss = bare(tokens, pos, mask, labels=tokens).float().mean()
            loss.backward()
            bare_opt.step()

        ours, floor = [], []
        for i in range(STEPS + WARMUP):
            # Interleaved, so load from other processes hits both sides alike.
            t0 = time.perf_counter()
            trainer.train_step()
            t1 = time.perf_counter()
            bare_step()
            t2 = time.perf_counter()
            if i >= WARMUP:
                ours.append(t1 - t0)
                floor.append(t2 - t1)
    ratio = statistics.median(ours) / statistics.median(floor)
    tok = 8 * 128
    print(f"model: L4 h128 rope+RMSNorm+SwiGLU+qk-norm, batch 8x128, {torch.get_num_threads()} threads")
    print(f"trainer step (median of {STEPS}): {statistics.median(ours) * 1000:.1f} ms "
          f"({tok / statistics.median(ours):.0f} tokens/s)")  # fmt: skip
    print(f"bare megatron-core step (median of {STEPS}): {statistics.median(floor) * 1000:.1f} ms")
    print(f"ratio: {ratio:.3f}x (target <= 1.05x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
