"""Pure config engine: AutoExperiment YAML to expanded, validated jobs (no Airflow import)."""
