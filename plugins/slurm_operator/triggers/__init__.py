"""Triggers: a Slurm job's end, a remote path's condition; one shared batching poller per connection."""

from slurm_operator.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "SlurmJobTrigger": ".slurm_job",
        "RemotePathTrigger": ".remote_path",
    },
)
