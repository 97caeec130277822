"""Triggerer-time code of a campaign DAG: checkpoint waits, the training job trigger, task states asked."""
