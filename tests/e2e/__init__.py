"""End-to-end tests: a reduced demo campaign through a real Airflow against the local Slurm cluster."""
