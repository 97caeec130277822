"""Experiment planner and DAG factory: composes the config engine and the Slurm layer."""
