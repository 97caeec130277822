#!/usr/bin/env bash
# Foreground wrapper of the compose `slurm` service: `scripts/local-cluster up`, publish the SSH client
# key and host public key to the shared volume, forward the compose network to sshd, `down` on SIGTERM.
#
# Environment (defaults are the image's layout):
#   AUTOEXP_REPO              repository root                  (/opt/autoexp)
#   AUTOEXP_CLUSTER_DIR       local-cluster state folder       ($AUTOEXP_REPO/.state/cluster)
#   AUTOEXP_SSH_SHARE         folder the keys are published to (/run/autoexp-ssh)
#   AUTOEXP_SSH_FORWARD_PORT  port on all interfaces forwarded to sshd; empty: none (2222)
#   AIRFLOW_UID               owner of the published private key (50000, Airflow's uid)
#   AUTOEXP_CLUSTER_CHECK_SECS  seconds between liveness checks; a dead daemon stops the container (15)
#   AUTOEXP_CLUSTER_UP_ARGS   extra `local-cluster up` options, e.g. "--ssh-port 16821 --cpus 4" (none)
#   AUTOEXP_DEMO_DIR          demo campaign folder; its data is prepared once when set (unset: skipped)
set -euo pipefail

REPO=${AUTOEXP_REPO:-/opt/autoexp}
BASE=${AUTOEXP_CLUSTER_DIR:-$REPO/.state/cluster}
SHARE=${AUTOEXP_SSH_SHARE:-/run/autoexp-ssh}
FORWARD_PORT=${AUTOEXP_SSH_FORWARD_PORT-2222}
KEY_OWNER=${AIRFLOW_UID:-50000}
CHECK_SECS=${AUTOEXP_CLUSTER_CHECK_SECS:-15}
read -r -a UP_ARGS <<<"${AUTOEXP_CLUSTER_UP_ARGS:-}"
CLUSTER="$REPO/scripts/local-cluster"

log() { echo "slurm-entrypoint: $*" >&2; }

# A container starts with no daemon running, but its pid files survive in the state volume, and a new
# container reuses small pids: a pid file naming a live process that is not its daemon is stale, and
# would make `up` skip that daemon.
clear_stale_pidfiles() {
    local f want pid comm
    for f in "$BASE/run/sshd.pid:sshd" "$BASE/run/slurmd.pid:slurmd" "$BASE/run/slurmctld.pid:slurmctld" \
        "$BASE/run/slurmdbd.pid:slurmdbd" "$BASE/run/mysqld.pid:mariadbd" "$BASE/munge/munged.pid:munged"; do
        want=${f##*:}
        f=${f%:*}
        [ -s "$f" ] || continue
        pid=$(cat "$f")
        comm=$(cat "/proc/$pid/comm" 2>/dev/null || true)
        if [ "$comm" != "$want" ]; then
            log "removing stale pid file $f (pid $pid is '${comm:-gone}', not $want)"
            rm -f "$f"
        fi
    done
}

# Publish atomically: Airflow's init may read the folder while this runs.
publish_keys() {
    local owner=()
    [ "$(id -u)" -ne 0 ] || owner=(-o "$KEY_OWNER" -g 0)
    install -d -m 755 "$SHARE"
    install -m 600 "${owner[@]}" "$LOCAL_CLUSTER_SSH_KEY" "$SHARE/.id_ed25519.tmp"
    mv -f "$SHARE/.id_ed25519.tmp" "$SHARE/id_ed25519"
    printf '%s\n' "$LOCAL_CLUSTER_HOST_PUBLIC_KEY" >"$SHARE/.host_ed25519.pub.tmp"
    mv -f "$SHARE/.host_ed25519.pub.tmp" "$SHARE/host_ed25519.pub"
    printf '%s\n' "$LOCAL_CLUSTER_SSH_USER" >"$SHARE/.user.tmp"
    mv -f "$SHARE/.user.tmp" "$SHARE/user"
}

# config/demo.yaml trains on $AUTOEXP_DEMO_DIR/data. Made before the keys are published, so the
# service is healthy (and Airflow starts) only once the data exists.
prepare_demo_data() {
    local dir=${AUTOEXP_DEMO_DIR:-}
    if [ -z "$dir" ] || [ -e "$dir/.data-prepared" ]; then return 0; fi
    log "preparing the demo data in $dir/data"
    PYTHONPATH="$REPO/include" "$REPO/.venv/bin/python" -m autoexp_cluster.prepare_data --output "$dir/data"
    touch "$dir/.data-prepared"
}

CHILDREN=()
SLEEP_PID=""
shutdown() {
    local rc=$1
    trap - TERM INT
    log "stopping the cluster"
    # Stop our helpers (socat, tail, sleep) by the pids we started them with.
    [ ${#CHILDREN[@]} -eq 0 ] || kill "${CHILDREN[@]}" 2>/dev/null || true
    [ -z "$SLEEP_PID" ] || kill "$SLEEP_PID" 2>/dev/null || true
    "$CLUSTER" down --dir "$BASE" || rc=1
    exit "$rc"
}
trap 'shutdown 0' TERM INT

clear_stale_pidfiles
"$CLUSTER" up --dir "$BASE" --no-install "${UP_ARGS[@]}"
eval "$("$CLUSTER" env --dir "$BASE")"
prepare_demo_data
publish_keys
log "cluster up: ssh ${LOCAL_CLUSTER_SSH_USER}@${LOCAL_CLUSTER_SSH_HOST}:${LOCAL_CLUSTER_SSH_PORT}," \
    "account $LOCAL_CLUSTER_ACCOUNT, partitions $LOCAL_CLUSTER_PARTITIONS; keys in $SHARE"

if [ -n "$FORWARD_PORT" ]; then
    socat "TCP-LISTEN:$FORWARD_PORT,fork,reuseaddr" "TCP:127.0.0.1:$LOCAL_CLUSTER_SSH_PORT" &
    CHILDREN+=($!)
    log "sshd reachable on port $FORWARD_PORT of every interface"
fi
# The daemons' logs on stdout, so `docker compose logs slurm` shows them.
tail -n 0 -F "$BASE/log/slurmctld.log" "$BASE/log/slurmd.log" "$BASE/log/slurmdbd.log" 2>/dev/null &
CHILDREN+=($!)

# The daemons detach, so this shell stays in the foreground and checks on them: a dead daemon ends
# the container (compose's restart policy brings it back) instead of leaving a healthy-looking shell.
while :; do
    sleep "$CHECK_SECS" &
    SLEEP_PID=$!
    wait "$SLEEP_PID" || true
    if ! "$CLUSTER" status --dir "$BASE" >/dev/null; then
        log "a cluster daemon died:"
        "$CLUSTER" status --dir "$BASE" >&2 || true
        shutdown 1
    fi
done
