#!/bin/bash
# Shared checkpoint/marker/lock functions for the autoexp helpers and the convert template.
# Sourced, never executed. Layout (megatron-autoexp's): RUN_DIR/checkpoints/iter_%07d +
# latest_checkpointed_iteration.txt, RUN_DIR/converted_checkpoints/iter_N.done,
# RUN_DIR/in_progress_checkpoints/iter_N.lock (N un-padded).

# Seconds after which a lock without a recognisable owner counts as stale.
AUTOEXP_LOCK_TTL="${AUTOEXP_LOCK_TTL:-21600}"
# A checkpoint whose conversion or evaluation failed this often is skipped (no endless retry loop).
AUTOEXP_MAX_FAILURES="${AUTOEXP_MAX_FAILURES:-3}"

# Print the tracker's iteration of checkpoint dir $1, or -1 when absent/unreadable/"release".
# Read as checkpoint_layout.parse_tracker reads it (ASCII digits between optional whitespace; "4 0"
# is no number); tests/include/test_tracker.py holds the two to one table.
autoexp_tracker() {
    local tracker="$1/latest_checkpointed_iteration.txt" value
    if [ ! -f "$tracker" ]; then echo -1; return 0; fi
    value="$(cat "$tracker" 2>/dev/null)"
    value="${value#"${value%%[![:space:]]*}"}"
    value="${value%"${value##*[![:space:]]}"}"
    if [[ "$value" =~ ^[0-9]+$ ]]; then echo "$((10#$value))"; else echo -1; fi
}

# Succeed when file $1 ends with a zip end-of-central-directory record: torch.save writes a zip
# archive whose central directory comes last, so a file cut short by a killed save lacks it.
autoexp_zip_finished() {
    [ "$(tail -c 22 "$1" 2>/dev/null | head -c 4 | od -An -tx1 | tr -d ' \n')" = "504b0506" ]
}

# Succeed when iteration dir $1 holds a complete checkpoint, judged by the files its format writes
# last, never by sizes (the same rules as src/autoexp/campaign/planning/checkpoint_layout.py):
# - torch_dist: megatron-core writes .metadata after the shards and metadata.json (a plain
#   json.dump, no trailing newline) after that;
# - legacy torch: every mp_rank_*/*.pt is a finished zip, and model_optim_rng.pt is among them;
#   with $2 (the dir the tracker names) the rank folders and their files must be the same as there.
autoexp_ckpt_complete() {
    local dir="$1" ref="${2:-}" rank f ranks=0
    if [ -e "$dir/metadata.json" ] || [ -e "$dir/.metadata" ]; then
        [ -s "$dir/.metadata" ] && grep -q '"sharded_backend"' "$dir/metadata.json" 2>/dev/null \
            && [ "$(tail -c 1 "$dir/metadata.json")" = "}" ]
        return
    fi
    for rank in "$dir"/mp_rank_*; do
        [ -d "$rank" ] || continue
        [ -f "$rank/model_optim_rng.pt" ] || return 1
        for f in "$rank"/*.pt; do
            autoexp_zip_finished "$f" || return 1
        done
        ranks=$((ranks + 1))
    done
    [ "$ranks" -gt 0 ] || return 1
    if [ -n "$ref" ] && [ "$ref" != "$dir" ] && compgen -G "$ref/mp_rank_*" >/dev/null; then
        [ "$(cd "$dir" && echo mp_rank_*/*.pt)" = "$(cd "$ref" && echo mp_rank_*/*.pt)" ] || return 1
    fi
}

# Print, ascending, the iterations of RUN_DIR $1 (>= MIN_ITER $2) that are real directories named
# exactly iter_%07d, reached by the tracker and complete. Symlinked checkpoints (a cooldown's branch
# point) belong to the run they link to and are not listed. The checkpoint dir is
# AUTOEXP_CKPT_DIR when set, else RUN_DIR/checkpoints.
autoexp_ready_iters() {
    local ckpt="${AUTOEXP_CKPT_DIR:-$1/checkpoints}" min="${2:-0}" tracker path base iter
    [ -d "$ckpt" ] || return 0
    tracker="$(autoexp_tracker "$ckpt")"
    for path in "$ckpt"/iter_*; do
        base="${path##*/}"
        [[ "$base" =~ ^iter_[0-9]{7}$ ]] || continue
        if [ ! -d "$path" ] || [ -L "$path" ]; then continue; fi
        iter=$((10#${base#iter_}))
        if [ "$iter" -lt "$min" ] || [ "$iter" -gt "$tracker" ]; then continue; fi
        autoexp_ckpt_complete "$path" "$ckpt/$(printf 'iter_%07d' "$tracker")" && echo "$iter"
    done | sort -n
}

# Succeed when the lock file $1 is held by a live owner. Owners are "slurm JOBID" or "pid HOST PID";
# anything else (e.g. the seed's empty lock) is live only until AUTOEXP_LOCK_TTL has passed.
autoexp_lock_live() {
    local lock="$1" kind id host state age
    [ -e "$lock" ] || return 1
    read -r kind id host < "$lock" || true
    case "$kind" in
        slurm)
            state="$(squeue -h -j "$id" -o %T 2>/dev/null || true)"
            case "$state" in
                RUNNING|PENDING|COMPLETING|CONFIGURING|SUSPENDED|REQUEUED|RESIZING|SIGNALING|STAGE_OUT) return 0 ;;
                *) return 1 ;;
            esac
            ;;
        pid)
            # host is the third field: "pid PID HOST".
            if [ "$host" = "$(hostname)" ]; then kill -0 "$id" 2>/dev/null; return; fi
            ;;
    esac
    age=$(( $(date +%s) - $(stat -c %Y "$lock") ))
    [ "$age" -lt "$AUTOEXP_LOCK_TTL" ]
}

# Owner line for a lock taken by this process.
autoexp_lock_owner() {
    if [ -n "${SLURM_JOB_ID:-}" ]; then echo "slurm $SLURM_JOB_ID"; else echo "pid $$ $(hostname)"; fi
}

# Atomically take lock $1 (O_EXCL via noclobber); a stale lock is replaced. Fails when held.
autoexp_lock_take() {
    local lock="$1"
    if [ -e "$lock" ]; then
        autoexp_lock_live "$lock" && return 1
        echo "[autoexp] recovering stale lock $lock ($(tr '\n' ' ' < "$lock"))" >&2
        rm -f "$lock"
    fi
    ( set -o noclobber; autoexp_lock_owner > "$lock" ) 2>/dev/null
}

# Number of recorded failures for iteration $2 of RUN_DIR $1.
autoexp_failures() {
    local file="$1/in_progress_checkpoints/iter_$2.failures"
    if [ -f "$file" ]; then wc -l < "$file" | tr -d ' '; else echo 0; fi
}

# Print the iterations of RUN_DIR $1 (>= $2) that still need conversion: ready, no .done marker,
# no live lock, fewer than AUTOEXP_MAX_FAILURES failures.
autoexp_pending_iters() {
    local run="$1" min="${2:-0}" iter
    for iter in $(autoexp_ready_iters "$run" "$min"); do
        [ -e "$run/converted_checkpoints/iter_$iter.done" ] && continue
        autoexp_lock_live "$run/in_progress_checkpoints/iter_$iter.lock" && continue
        [ "$(autoexp_failures "$run" "$iter")" -lt "$AUTOEXP_MAX_FAILURES" ] || continue
        echo "$iter"
    done
}
