"""Convert one Megatron checkpoint to HuggingFace, then evaluate it with lm-eval: one Python process.

What ``python -m autoexp_cluster.convert`` followed by ``python -m autoexp_cluster.evaluate`` do,
with one interpreter start instead of two: torch and transformers are imported once per checkpoint.
On a cluster those imports come from a shared file system, where they can outlast a small model's
whole conversion. The evaluation runs only on a conversion that succeeded; the exit status is the
failing step's (1), so the job records the checkpoint's failure as before.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from pathlib import Path

from autoexp_cluster import convert, evaluate


def _has_process_group() -> bool:
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized())


def _release_logit_check(had_group: bool) -> None:
    """Free the logit check's two models and end the process group and megatron parallel state it
    set up (not a caller's), so that lm-eval starts as it would in a process of its own (only the CPU
    shim, where there is no CUDA, stays: it is process-wide)."""
    if not had_group and _has_process_group():
        import torch.distributed as dist
        from megatron.core import parallel_state

        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    gc.collect()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m autoexp_cluster.convert_eval", description=__doc__)
    p.add_argument("--load", type=Path, required=True, help="iter_%%07d dir, or a checkpoints dir")
    p.add_argument("--save", type=Path, required=True, help="output HF directory")
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval tasks or groups")
    p.add_argument("--tasks-path", type=Path, default=None, help="lm-eval include path")
    p.add_argument("--output", type=Path, required=True, help="results.json path")
    args = p.parse_args(argv)
    had_group = _has_process_group()
    rc = convert.main(["--load", str(args.load), "--save", str(args.save)])
    if rc != 0:
        return rc
    _release_logit_check(had_group)
    print(f"evaluating {args.save} on {args.tasks} -> {args.output}", flush=True)
    tasks_path = [] if args.tasks_path is None else ["--tasks-path", str(args.tasks_path)]
    model = ["--model", str(args.save), "--tasks", args.tasks, *tasks_path]
    return evaluate.main([*model, "--output", str(args.output)])


if __name__ == "__main__":
    sys.exit(main())
