#!/usr/bin/env bash
# One-shot `airflow-init` service: migrate the metadata database, (re)create the SSH connection to the
# compose slurm service from the keys it published (host-key checking on), and the Slurm pool.
set -euo pipefail

CONN_ID=${AUTOEXP_SSH_CONN_ID:-slurm_local}
KEY_DIR=${AUTOEXP_SSH_KEY_DIR:-/opt/airflow/slurm-ssh}
SLURM_HOST=${AUTOEXP_SLURM_HOST:-slurm}
SLURM_PORT=${AUTOEXP_SLURM_PORT:-2222}
POOL=${AUTOEXP_POOL:-slurm_local}
POOL_SLOTS=${AUTOEXP_POOL_SLOTS:-8}
HERE=$(cd "$(dirname "$0")" && pwd)

airflow db migrate
conn=$(python "$HERE/slurm_connection.py" --key-dir "$KEY_DIR" --host "$SLURM_HOST" --port "$SLURM_PORT")
# Delete + add: the slurm volume may have been recreated with new keys since the last start.
airflow connections delete "$CONN_ID" >/dev/null 2>&1 || true
airflow connections add "$CONN_ID" --conn-json "$conn"
# Tasks naming a pool that does not exist are never scheduled; the Slurm tasks wait deferred, and a pool
# that does not count deferred tasks caps nothing.
airflow pools set "$POOL" "$POOL_SLOTS" "Slurm jobs on the compose cluster" --include-deferred >/dev/null
echo "airflow-init: pool $POOL ($POOL_SLOTS slots), connection $CONN_ID -> $SLURM_HOST:$SLURM_PORT (host key checked)"
