"""Sensors: wait deferred for a remote path or a job log line."""

from slurm_operator.lazy_exports import lazy_exports

__all__, __getattr__ = lazy_exports(
    __name__,
    {
        "RemotePathSensor": ".remote_path",
        "SlurmLogSensor": ".remote_path",
    },
)
