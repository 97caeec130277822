"""The Airflow side: turns plans into DAGs, operators and triggers; decides nothing of its own."""
