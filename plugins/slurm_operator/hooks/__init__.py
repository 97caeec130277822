"""Hooks: Slurm over one SSH connection, blocking (workers) and asyncio (triggerer)."""

from slurm_operator.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "SlurmHook": ".slurm",
        "AsyncSlurmHook": ".slurm_async",
    },
)
