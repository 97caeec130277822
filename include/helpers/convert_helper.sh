#!/bin/bash
# shellcheck source-path=SCRIPTDIR
# convert_helper.sh <RUN_DIR> [MIN_ITER]: print 1 when RUN_DIR has a checkpoint that is ready for
# conversion (tracker reached it, files complete, not converted, not locked by a live job, under the
# failure cap), else 0. Always exits 0: it is an AutoExperiment start/termination condition.
# The seed's call form `convert_helper.sh RUN_DIR IGNORED MIN_ITER` is still accepted.
set -uo pipefail

if [ $# -lt 1 ] || [ $# -gt 3 ]; then
    echo "usage: convert_helper.sh <RUN_DIR> [MIN_ITER]" >&2
    echo 0
    exit 0
fi
RUN_DIR="$1"
if [ $# -eq 3 ]; then MIN_ITER="$3"; else MIN_ITER="${2:-0}"; fi
if ! [[ "$MIN_ITER" =~ ^[0-9]+$ ]]; then
    echo "convert_helper.sh: MIN_ITER must be a non-negative integer, got '$MIN_ITER'" >&2
    echo 0
    exit 0
fi

# shellcheck source=ckpt_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/ckpt_lib.sh"

if [ -n "$(autoexp_pending_iters "$RUN_DIR" "$MIN_ITER" | head -n 1)" ]; then echo 1; else echo 0; fi
