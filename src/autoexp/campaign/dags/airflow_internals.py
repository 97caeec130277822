"""Every private Airflow API the campaign layer relies on, and nowhere else (pinned by its test).

Each entry says why no public API does the job. Airflow upgrades break here first.
"""

from __future__ import annotations

# -- DAG building (used by the factory) -------------------------------------------------------------

# (end of the DAG building section)
#
#
# -- the triggerer's comms (used by ti_states) ----------------------------------------------------
