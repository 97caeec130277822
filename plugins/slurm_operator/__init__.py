"""Generic Slurm-over-SSH for Airflow: hook, command builders, parsers, states, triggers, operators, sensors."""
