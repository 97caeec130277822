"""Cluster-side tools run inside sbatch jobs: trainer, converter, evaluator, data preparation."""
