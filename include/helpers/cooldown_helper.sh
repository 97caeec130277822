#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# cooldown_helper.sh <LOGS> <EXP_NAME> <ITER> <CD_SCALE>: prepare the cooldown run dir
# LOGS/EXP_NAME/cooldown_sCD_SCALE/checkpoints to branch from pretrain iteration ITER, and print 1
# when the cooldown can start, else 0. Always exits 0 (AutoExperiment start condition).
# Unlike the seed's: the pretrain checkpoint must be exactly iter_%07d, reached by the pretrain
# tracker and complete; re-running never touches a cooldown that already branched or has its own
# checkpoints; ITER=0 starts the cooldown from scratch (no branch).
set -uo pipefail

if [ $# -ne 4 ]; then
    echo "usage: cooldown_helper.sh <LOGS> <EXP_NAME> <ITER> <CD_SCALE>" >&2
    echo 0
    exit 0
fi
LOGS="$1" EXP_NAME="$2" ITER="$3" CD_SCALE="$4"
if ! [[ "$ITER" =~ ^[0-9]+$ ]]; then
    echo "cooldown_helper.sh: ITER must be a non-negative integer, got '$ITER'" >&2
    echo 0
    exit 0
fi
ITER=$((10#$ITER))

# shellcheck source=ckpt_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ckpt_lib.sh"

PRETRAIN_CKPT="$LOGS/$EXP_NAME/checkpoints"
COOLDOWN_CKPT="$LOGS/$EXP_NAME/cooldown_s$CD_SCALE/checkpoints"
NAME="$(printf 'iter_%07d' "$ITER")"

# Already branched (tracker present) or already training on its own: never rewrite the tracker,
# or a resubmitted cooldown would lose its progress.
if [ "$(autoexp_tracker "$COOLDOWN_CKPT")" -ge 0 ]; then
    echo 1
    exit 0
fi

if [ "$ITER" -eq 0 ]; then
    # No pretrain checkpoint to branch from: the cooldown trains from scratch.
    echo "cooldown_helper.sh: ITER=0, cooldown_s$CD_SCALE starts from scratch" >&2
    mkdir -p "$COOLDOWN_CKPT"
    echo 1
    exit 0
fi

if [ "$(autoexp_tracker "$PRETRAIN_CKPT")" -lt "$ITER" ] || [ ! -d "$PRETRAIN_CKPT/$NAME" ] \
    || ! autoexp_ckpt_complete "$PRETRAIN_CKPT/$NAME" \
        "$PRETRAIN_CKPT/$(printf 'iter_%07d' "$(autoexp_tracker "$PRETRAIN_CKPT")")"; then
    echo 0
    exit 0
fi

mkdir -p "$COOLDOWN_CKPT"
ln -sfn "$(cd "$PRETRAIN_CKPT/$NAME" && pwd -P)" "$COOLDOWN_CKPT/$NAME"
# The tracker is written last and atomically: a reader sees either no tracker or the full value.
echo "$ITER" > "$COOLDOWN_CKPT/.latest_checkpointed_iteration.txt.tmp"
mv -f "$COOLDOWN_CKPT/.latest_checkpointed_iteration.txt.tmp" "$COOLDOWN_CKPT/latest_checkpointed_iteration.txt"
echo 1
