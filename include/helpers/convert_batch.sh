#!/bin/bash
# The checkpoints a phase's shared conversion job processes (airflow.share_conversion_jobs; the
# convert template sources this after ckpt_lib.sh). Sourced, never executed.

# autoexp_batch_iters RUN_DIR START INTERVAL LAST: print, ascending, the iterations of RUN_DIR that
# are pending (autoexp_pending_iters: ready, no .done marker, no live lock, under the failure cap)
# and planned: a multiple of INTERVAL after START, or LAST, never beyond LAST (plan.py's
# expected_checkpoints; tests/include/test_convert_batch.py holds the two to one table). A checkpoint
# Megatron saved elsewhere (at a time limit, on a signal) is no task's and is left alone.
autoexp_batch_iters() {
    local run="$1" start="$2" every="$3" last="$4" iter
    for iter in $(autoexp_pending_iters "$run" "$((start + 1))"); do
        [ "$iter" -le "$last" ] || continue
        if [ "$((iter % every))" -eq 0 ] || [ "$iter" -eq "$last" ]; then echo "$iter"; fi
    done
}

# autoexp_series_check SERIES: succeed when SERIES is "START INTERVAL LAST" (integers, INTERVAL > 0).
autoexp_series_check() {
    local pattern='^(0|[1-9][0-9]*) [1-9][0-9]* (0|[1-9][0-9]*)$'
    [[ "$1" =~ $pattern ]]
}
