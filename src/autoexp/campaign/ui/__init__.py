"""The campaign in Airflow's UI (a plugin's FastAPI app), and the REST client it shares with the CLI."""
