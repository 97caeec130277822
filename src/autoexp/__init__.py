"""autoexp: AutoExperiment-compatible scaling-law campaigns on Slurm, orchestrated by Airflow."""
