"""DAG integrity tests (no database, no cluster)."""
