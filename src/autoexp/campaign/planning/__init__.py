"""The pure planning side: config jobs -> experiment plans, run-folder and checkpoint layout, settings,
DAG docs text, report data. Decides everything; imports no Airflow (an import-linter contract)."""
