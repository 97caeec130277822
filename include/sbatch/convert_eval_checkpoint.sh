#!/bin/bash
# autoexp convert+eval template (AutoExperiment format: Python str.format over the whole file, every
# literal brace doubled). Converts Megatron checkpoints to HuggingFace and evaluates them with lm-eval.
# With CKPT_ITER set at submit time only that iteration is processed (one Slurm job per checkpoint);
# with CKPT_SERIES="START INTERVAL LAST" every checkpoint of that series that is ready and not done,
# also those saved while it runs (one job for a phase's conversions: airflow.share_conversion_jobs);
# with neither every unconverted checkpoint, earliest first, like the seed's.
# Variables: docs/cluster-tools.md.
#SBATCH --account={ACCOUNT}
#SBATCH --partition={PARTITION}
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={CONVERT_CPUS_PER_TASK}
#SBATCH --gpus-per-node={CONVERT_GPUS_PER_NODE}
#SBATCH --time={CONVERT_TIME}
#SBATCH --output={output_file}
#SBATCH --open-mode=append
#SBATCH --job-name={name}

set -uo pipefail

echo "[autoexp] job ${{SLURM_JOB_ID:-none}} on $(hostname) started $(date -u +%FT%TZ)"

PYTHON="{PYTHON}"
RUN_DIR="{RUN_DIR}"
SOURCE_CHECKPOINT_PATH="{SOURCE_CHECKPOINT_PATH}"
TARGET_HF_PATH="{TARGET_HF_PATH}"
export AUTOEXP_CKPT_DIR="$SOURCE_CHECKPOINT_PATH"
export PYTHONPATH="{AUTOEXP_INCLUDE}${{PYTHONPATH:+:$PYTHONPATH}}"
export HF_HOME="{HF_HOME}" HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export OMP_NUM_THREADS="${{OMP_NUM_THREADS:-{CONVERT_CPUS_PER_TASK}}}"
# shellcheck disable=SC1091  # the helpers live on the cluster, under AUTOEXP_INCLUDE
source "{AUTOEXP_INCLUDE}/helpers/ckpt_lib.sh"
# shellcheck disable=SC1091  # as ckpt_lib.sh
source "{AUTOEXP_INCLUDE}/helpers/convert_batch.sh"
# shellcheck disable=SC1091  # as ckpt_lib.sh
source "{AUTOEXP_INCLUDE}/helpers/site_env.sh"
autoexp_site_env "{MODULES}" "{JOB_ENV}" || exit 2

# ---- container runtime: apptainer | singularity | none (include/helpers/container_runtime.sh) ----
GPUS_PER_NODE={CONVERT_GPUS_PER_NODE}
# shellcheck disable=SC1091  # as ckpt_lib.sh above
source "{AUTOEXP_INCLUDE}/helpers/container_runtime.sh"
autoexp_container "{CONTAINER_RUNTIME}" "$GPUS_PER_NODE" "{CONTAINER_IMAGE}" "{CONTAINER_ARGS}" || exit 2

mkdir -p "$RUN_DIR/converted_checkpoints" "$RUN_DIR/in_progress_checkpoints" "$RUN_DIR/eval_results" \
    "$TARGET_HF_PATH"

# Convert and evaluate one iteration under its lock. Returns non-zero on failure (recorded, so a
# poison checkpoint is given up after AUTOEXP_MAX_FAILURES attempts instead of looping forever).
process_iter() {{
    local iter="$1" lock="$RUN_DIR/in_progress_checkpoints/iter_$1.lock"
    local load target results rc
    load="$SOURCE_CHECKPOINT_PATH/$(printf 'iter_%07d' "$iter")"
    target="$TARGET_HF_PATH/iter_$iter"
    results="$RUN_DIR/eval_results/iter_$iter/results.json"
    if ! autoexp_lock_take "$lock"; then
        echo "[autoexp] iter $iter is locked by a live job ($(tr '\n' ' ' < "$lock")), skipping"
        return 0
    fi
    echo "[autoexp] converting iter $iter: $load -> $target, then evaluating it on {EVAL_TASKS} -> $results"
    # One process for both (torch and transformers imported once); it evaluates only a good conversion.
    "${{CONTAINER[@]}}" "$PYTHON" -u -m autoexp_cluster.convert_eval --load "$load" --save "$target" \
        --tasks "{EVAL_TASKS}" --tasks-path "{EVAL_TASKS_PATH}" --output "$results"
    rc=$?
    if [ "$rc" -eq 0 ]; then
        touch "$RUN_DIR/converted_checkpoints/iter_$iter.done"
        echo "[autoexp] iter $iter done"
    else
        echo "$(date -u +%FT%TZ) job ${{SLURM_JOB_ID:-none}} rc $rc" >> "$RUN_DIR/in_progress_checkpoints/iter_$iter.failures"
        echo "[autoexp] iter $iter FAILED (rc $rc, $(autoexp_failures "$RUN_DIR" "$iter") failure(s) so far)" >&2
    fi
    rm -f "$lock"
    return "$rc"
}}

if [ -n "${{CKPT_ITER:-}}" ]; then
    if ! [[ "$CKPT_ITER" =~ ^[0-9]+$ ]]; then
        echo "[autoexp] CKPT_ITER must be an integer, got '$CKPT_ITER'" >&2; exit 2
    fi
    ITER=$((10#$CKPT_ITER))
    if [ -e "$RUN_DIR/converted_checkpoints/iter_$ITER.done" ]; then
        echo "[autoexp] iter $ITER already converted and evaluated"; exit 0
    fi
    if ! autoexp_ready_iters "$RUN_DIR" "$ITER" | grep -qx "$ITER"; then
        echo "[autoexp] checkpoint iter $ITER of $SOURCE_CHECKPOINT_PATH is missing, incomplete or beyond the tracker" >&2
        exit 3
    fi
    process_iter "$ITER"
    exit $?
fi

SERIES="${{CKPT_SERIES:-}}"
if [ -n "$SERIES" ] && ! autoexp_series_check "$SERIES"; then
    echo "[autoexp] CKPT_SERIES must be 'START INTERVAL LAST' (integers, INTERVAL > 0), got '$SERIES'" >&2
    exit 2
fi
pending_iters() {{
    if [ -n "$SERIES" ]; then
        # shellcheck disable=SC2086  # three numbers, checked above
        autoexp_batch_iters "$RUN_DIR" $SERIES
    else
        autoexp_pending_iters "$RUN_DIR"
    fi
}}

STATUS=0
FAILED=" "
while true; do
    # Checkpoints written while this job runs are picked up too; one that failed in this job is
    # left to the next job (its failure count caps the retries).
    NEXT=""
    for CAND in $(pending_iters); do
        case "$FAILED" in *" $CAND "*) continue ;; esac
        NEXT="$CAND"
        break
    done
    if [ -z "$NEXT" ]; then break; fi
    process_iter "$NEXT" || {{ STATUS=1; FAILED="$FAILED$NEXT "; }}
done
echo "[autoexp] no unconverted checkpoint left in $SOURCE_CHECKPOINT_PATH"
if [ -n "$SERIES" ] && [ "$STATUS" -ne 0 ]; then
    # A shared job: each task judges its own checkpoint by its done marker, so one checkpoint's
    # failure fails no other's task; its own resubmits, and the next job retries it (failure cap).
    echo "[autoexp] failed in this job:$FAILED(left to the next job)" >&2
    exit 0
fi
exit "$STATUS"
