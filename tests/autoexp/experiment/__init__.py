"""Tests of the planner and the DAG factory."""
