"""Airflow plugin of the Slurm operator: registers the listener that cancels a stopped task's job."""

from airflow.plugins_manager import AirflowPlugin

from slurm_operator import listener


class SlurmOperatorPlugin(AirflowPlugin):
    """``listeners``: ``slurm_operator.listener`` (every Airflow process loads it; it acts only on a
    task instance that still points at a Slurm job trigger)."""

    name = "slurm_operator"
    listeners = [listener]  # noqa: RUF012
