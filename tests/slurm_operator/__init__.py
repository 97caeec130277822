"""Tests of the Slurm-over-SSH layer (plugins/slurm_operator)."""
