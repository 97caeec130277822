"""Operators: SlurmOperator submits, waits deferred and resubmits a Slurm job until its work is done."""

from slurm_operator.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "SlurmOperator": ".slurm",
    },
)
