"""Configs on the Airflow side: the expansion cache, which DAG file builds which config, config sources."""
