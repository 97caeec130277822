"""Make megatron-core 0.16.1 run on a CPU-only torch (applied only when CUDA is absent)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import torch

log = logging.getLogger(__name__)

_applied = False


def apply_cpu_shim() -> None:
    """Patch the CUDA-only calls megatron-core makes on the local-spec and dist_checkpointing paths.

    The patch is process-wide (``torch.cuda.current_device`` is replaced), which is why the trainer
    runs in its own process. Call after ``initialize_model_parallel`` and before seeding megatron's
    model-parallel RNG tracker (which ``DotProductAttention`` forks even with dropout 0).
    """
    global _applied
    from megatron.core.tensor_parallel import random as mrand

    if not _applied:
        # GlobalMemoryBuffer, RotaryEmbedding and dist_checkpointing ask for the "current CUDA device".
        torch.cuda.current_device = lambda: torch.device("cpu")  # type: ignore[assignment,return-value]
        # dist_checkpointing's async writer synchronises before preloading tensors.
        torch.cuda.synchronize = lambda *_a, **_k: None

        def add(self: Any, name: str, seed: int) -> None:
            self._is_initialized = True
            if seed in self.seeds_ or name in self.states_:
                raise RuntimeError(f"RNG state {name!r} or seed {seed} already exists")
            self.seeds_.add(seed)
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        @contextlib.contextmanager
        def fork(self: Any, name: str = mrand._MODEL_PARALLEL_RNG_TRACKER_NAME) -> Iterator[None]:
            orig = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(orig)

        mrand.CudaRNGStatesTracker.add = add
        mrand.CudaRNGStatesTracker.fork = fork
        _applied = True
        log.debug("megatron-core CPU shim applied")
