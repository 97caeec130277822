#!/usr/bin/env bash
# Health of the compose `slurm` service: every daemon runs, the node takes jobs, the keys are
# published and sshd answers on the forwarded port. Same environment as entrypoint.sh.
set -euo pipefail

REPO=${AUTOEXP_REPO:-/opt/autoexp}
BASE=${AUTOEXP_CLUSTER_DIR:-$REPO/.state/cluster}
SHARE=${AUTOEXP_SSH_SHARE:-/run/autoexp-ssh}
FORWARD_PORT=${AUTOEXP_SSH_FORWARD_PORT-2222}

# Exit 1, never another code: Docker reserves 2, and only 0/1 have a meaning to it.
status=$("$REPO/scripts/local-cluster" status --dir "$BASE" 2>&1) || {
    echo "cluster not running: $status" >&2
    exit 1
}
grep -Eq '^node +(idle|mix|alloc)' <<<"$status" || {
    echo "node not ready: $status" >&2
    exit 1
}
for f in id_ed25519 host_ed25519.pub user; do
    [ -s "$SHARE/$f" ] || {
        echo "$SHARE/$f not published yet" >&2
        exit 1
    }
done
if [ -n "$FORWARD_PORT" ]; then
    # The SSH banner proves the forward reaches a live sshd, not just an open socket.
    exec 3<>"/dev/tcp/127.0.0.1/$FORWARD_PORT"
    read -r -t 5 banner <&3 || true
    exec 3<&-
    [[ "$banner" == SSH-2.0-* ]] || {
        echo "no SSH banner on port $FORWARD_PORT" >&2
        exit 1
    }
fi
