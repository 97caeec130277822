#!/bin/bash
# autoexp training template (AutoExperiment format: rendered with Python str.format over the whole
# file, so every literal brace is doubled). Drives Megatron-LM's pretrain_gpt.py, or autoexp's own
# megatron-core trainer, through torchrun. Variables: docs/cluster-tools.md.
#SBATCH --account={ACCOUNT}
#SBATCH --partition={PARTITION}
#SBATCH --nodes={NODES}
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task={CPUS_PER_TASK}
#SBATCH --gpus-per-node={GPUS_PER_NODE}
#SBATCH --time={TIME}
#SBATCH --output={output_file}
#SBATCH --open-mode=append
#SBATCH --job-name={name}
# At the time limit: SIGTERM to this shell 120 s before it (Slurm's own SIGTERM would leave only
# KillWait, 30 s by default), passed on to the training (see the end). docs/cluster-tools.md.
#SBATCH --signal=B:TERM@120

set -euo pipefail

echo "[autoexp] job ${{SLURM_JOB_ID:-none}} on ${{SLURM_JOB_NODELIST:-$(hostname)}} started $(date -u +%FT%TZ)"

# ---- environment -------------------------------------------------------------------------------
PYTHON="{PYTHON}"
TRAIN_SCRIPT="{TRAIN_SCRIPT}"
RUN_DIR="{RUN_DIR}"
CHECKPOINT_PATH="$RUN_DIR/checkpoints"
export PYTHONPATH="{AUTOEXP_INCLUDE}${{PYTHONPATH:+:$PYTHONPATH}}"
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NCCL_IB_TIMEOUT=150
export OMP_NUM_THREADS="${{OMP_NUM_THREADS:-{CPUS_PER_TASK}}}"
# Site settings (the YAML's SOCKET_IFNAME, MODULES, JOB_ENV; docs/config.md), never the login shell's.
SOCKET_IFNAME="{SOCKET_IFNAME}"
if [ -n "$SOCKET_IFNAME" ]; then
    export GLOO_SOCKET_IFNAME="$SOCKET_IFNAME" NCCL_SOCKET_IFNAME="$SOCKET_IFNAME"
fi
# shellcheck disable=SC1091  # the helpers live on the cluster, under AUTOEXP_INCLUDE
source "{AUTOEXP_INCLUDE}/helpers/site_env.sh"
autoexp_site_env "{MODULES}" "{JOB_ENV}" || exit 2
mkdir -p "$CHECKPOINT_PATH" "{LOGS}/.megatron_cache"

# ---- time limit and resume (docs/cluster-tools.md#time-limits-and-corrupt-checkpoints) ----------
# Set in the YAML's JOB_ENV, e.g. "AUTOEXP_EXIT_MARGIN_MINUTES=20"; defaults here, so any config renders.
EXIT_MARGIN_MINUTES="${{AUTOEXP_EXIT_MARGIN_MINUTES:-10}}"
MAX_CKPT_ROLLBACKS="${{AUTOEXP_MAX_CKPT_ROLLBACKS:-2}}"
# shellcheck disable=SC1091  # as site_env.sh above
source "{AUTOEXP_INCLUDE}/helpers/time_limit.sh"
# The trainer stops by itself, saving, this long after it starts: TIME minus what has run minus the margin.
EXIT_MINUTES="$(autoexp_exit_minutes "{TIME}" "$EXIT_MARGIN_MINUTES" "$SECONDS")"
if [ -z "$EXIT_MINUTES" ]; then
    echo "[autoexp] TIME {TIME} leaves no minute after the exit margin ($EXIT_MARGIN_MINUTES min): no --exit-duration-in-mins, only the signal"
fi

# ---- container runtime: apptainer | singularity | none (include/helpers/container_runtime.sh) ----
GPUS_PER_NODE={GPUS_PER_NODE}
# shellcheck disable=SC1091  # as site_env.sh above
source "{AUTOEXP_INCLUDE}/helpers/container_runtime.sh"
autoexp_container "{CONTAINER_RUNTIME}" "$GPUS_PER_NODE" "{CONTAINER_IMAGE}" "{CONTAINER_ARGS}" || exit 2

# The checkpoint the tracker names must be whole before anything resumes from it: a corrupt one is set
# aside (renamed) and the tracker rolled back, at most MAX_CKPT_ROLLBACKS times per training (exit 3 then).
"${{CONTAINER[@]}}" "$PYTHON" "{AUTOEXP_INCLUDE}/autoexp_cluster/ckpt_check.py" "$CHECKPOINT_PATH" \
    --max-rollbacks "$MAX_CKPT_ROLLBACKS" || exit 3

# ---- rendezvous ---------------------------------------------------------------------------------
NPROC_PER_NODE=$(( GPUS_PER_NODE > 0 ? GPUS_PER_NODE : 1 ))
NNODES="${{SLURM_NNODES:-1}}"
if [ "$NNODES" -gt 1 ]; then
    # First node of the allocation, by its Slurm NodeAddr (node names need not resolve); the port is
    # derived from the job id as in the seed.
    FIRST_NODE="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
    NODE_ADDR="$(scontrol show node "$FIRST_NODE" 2>/dev/null | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p' | head -n 1)"
    MASTER_ADDR="${{NODE_ADDR:-$FIRST_NODE}}{MASTER_ADDR_SUFFIX}"
    MASTER_PORT=$((10000 + SLURM_JOB_ID % 10000))
    export MASTER_ADDR MASTER_PORT
    RDZV=(--nnodes "$NNODES" --rdzv-endpoint "$MASTER_ADDR:$MASTER_PORT" --rdzv-backend static)
else
    # One node: torchrun picks a free local port, so concurrent jobs on a node never collide.
    RDZV=(--standalone --nnodes 1)
fi

# A cooldown resumes a pretrain checkpoint: no second warmup.
PHASE="{PHASE}"
if [ "$PHASE" = "COOLDOWN" ]; then WARMUP_ITERS=0; else WARMUP_ITERS={LR_WARMUP_ITERS}; fi
# Megatron-LM's legacy format cannot be resharded; torch_dist can.
TP={TP} PP={PP}
if [ "$TP" -gt 1 ] || [ "$PP" -gt 1 ]; then CKPT_FORMAT=torch_dist; else CKPT_FORMAT=torch; fi

# shellcheck disable=SC2054  # "--split 989,10,1" is one value
ARGS=(
    --data-path {DATA_PATH}
    --tokenizer-model "{TOKENIZER_MODEL}"
    --tokenizer-type {TOKENIZER_TYPE}
    --split 989,10,1
    --num-workers {DATA_NUM_WORKERS}
    --data-cache-path "{LOGS}/.megatron_cache"
    --num-layers {NUM_LAYERS}
    --hidden-size {HIDDEN_SIZE}
    --num-attention-heads {NUM_ATTN_HEADS}
    --ffn-hidden-size {FFN_HIDDEN_SIZE}
    --seq-length {SEQ_LENGTH}
    --max-position-embeddings {MAX_POSITION_EMBEDDINGS}
    --tensor-model-parallel-size {TP}
    --pipeline-model-parallel-size {PP}
    --sequence-parallel
    --micro-batch-size {MICRO_BATCH_SIZE}
    --global-batch-size {GLOBAL_BATCH_SIZE}
    --train-iters {TRAIN_ITERS}
    --weight-decay {WD}
    --adam-beta1 {BETA1}
    --adam-beta2 {BETA2}
    --clip-grad {CLIP_GRAD}
    --lr {LR}
    --min-lr {MIN_LR}
    --lr-decay-style {LR_DECAY_STYLE}
    --lr-wsd-decay-style {LR_WSD_DECAY_STYLE}
    --lr-warmup-iters "$WARMUP_ITERS"
    --lr-decay-iters {LR_DECAY_ITERS}
    --lr-wsd-decay-iters {LR_WSD_DECAY_ITERS}
    --use-flash-attn
    --bf16
    --qk-layernorm
    {DISABLE_BIAS_LINEAR}
    --position-embedding-type rope
    --rotary-base 100000
    --rotary-percent 1.0
    --normalization RMSNorm
    --swiglu
    --use-distributed-optimizer
    --overlap-param-gather
    --overlap-grad-reduce
    --use-checkpoint-args
    --override-opt_param-scheduler
    --ckpt-format "$CKPT_FORMAT"
    --log-interval {LOG_INTERVAL}
    --log-throughput
    --save-interval {SAVE_INTERVAL}
    --eval-interval {TRAIN_ITERS}
    --eval-iters {EVAL_ITERS}
    --save "$CHECKPOINT_PATH"
    --load "$CHECKPOINT_PATH"
    --tensorboard-dir "$CHECKPOINT_PATH/tensorboard"
    --exit-signal-handler
)
if [ -n "$EXIT_MINUTES" ]; then ARGS+=(--exit-duration-in-mins "$EXIT_MINUTES"); fi
if [ "$GPUS_PER_NODE" -gt 0 ]; then ARGS+=(--distributed-backend nccl); else ARGS+=(--distributed-backend gloo); fi

LAUNCH=(
    "${{CONTAINER[@]}}" "$PYTHON" -u -m torch.distributed.run
    --nproc-per-node "$NPROC_PER_NODE" "${{RDZV[@]}}" --max-restarts 0
    "$TRAIN_SCRIPT" "${{ARGS[@]}}"
)
echo "[autoexp] launching: ${{LAUNCH[*]}}"
# The time-limit signal (#SBATCH --signal=B:TERM@...) reaches this shell only. `scancel --signal`
# passes it to every process of the job's steps (never `kill srun`: srun answers SIGTERM by killing
# the step), where Megatron-LM's --exit-signal-handler saves and exits. torchrun's agent gets it too
# and exits non-zero (after at most 30 s for its workers), so a stop at the limit ends the job 0: the
# tracker is short of TRAIN_ITERS and the training is resubmitted (a save cut short is caught by
# ckpt_check above). srun runs in the background because bash runs a trap only between commands.
STOPPED_AT_LIMIT=0
on_limit() {{
    STOPPED_AT_LIMIT=1
    echo "[autoexp] time-limit signal at $(date -u +%FT%TZ): passing SIGTERM to the training to save and stop"
    scancel --signal=TERM "$SLURM_JOB_ID" || kill -TERM "$SRUN_PID" 2>/dev/null || true
}}
trap on_limit TERM
# torchrun reads --node-rank from PET_NODE_RANK: each srun task sets its own.
# shellcheck disable=SC2016  # expanded by the per-task shell, not here
srun --wait=60 --kill-on-bad-exit=1 --ntasks-per-node=1 \
    bash -c 'export PET_NODE_RANK="$SLURM_PROCID"; exec "$@"' autoexp-launch "${{LAUNCH[@]}}" &
SRUN_PID=$!
RC=0
wait "$SRUN_PID" || RC=$?
if [ "$STOPPED_AT_LIMIT" = 1 ]; then
    # The first wait returned when the trap ran; this one lasts until the training has stopped.
    wait "$SRUN_PID" || RC=$?
    echo "[autoexp] stopped at the time limit (training exit $RC): ending the job 0 for its resubmission"
    RC=0
fi
echo "[autoexp] job ${{SLURM_JOB_ID:-none}} finished $(date -u +%FT%TZ) (exit $RC)"
exit "$RC"
