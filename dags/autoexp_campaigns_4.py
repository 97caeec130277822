"""Campaign DAGs: this file's share of $AUTOEXP_CONFIGS (one airflow dag file per config, see docs)."""

from autoexp.campaign.dags.dag_files import register_file

register_file(globals(), __file__)
