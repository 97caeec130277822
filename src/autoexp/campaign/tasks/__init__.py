"""Task-time code of a campaign DAG: its operators and the callables they run on Airflow workers."""
