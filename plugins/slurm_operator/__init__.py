"""Generic Slurm-over-SSH for Airflow: hook, commands, parsers, states, triggers, operators, sensors."""
