#!/bin/bash
# The container runtime of both sbatch templates (include/sbatch/): CONTAINER_RUNTIME -> the command
# prefix every launch goes through. Sourced, never executed.
# shellcheck disable=SC2034  # CONTAINER is read by the template that sources this file

# autoexp_container RUNTIME GPUS_PER_NODE IMAGE [EXTRA_ARGS]: set the array CONTAINER to the prefix
# ("apptainer exec --nv EXTRA_ARGS IMAGE", or empty for "none"); return 2 on an unknown runtime.
# EXTRA_ARGS (the YAML's CONTAINER_ARGS, e.g. "--bind /p/data1") is split on white space.
autoexp_container() {
    local runtime="$1" gpus="$2" image="$3" args="${4:-}"
    local -a extra
    case "$runtime" in
        apptainer|singularity)
            CONTAINER=("$runtime" exec)
            if [ "$gpus" -gt 0 ]; then CONTAINER+=(--nv); fi
            read -r -a extra <<< "$args"
            CONTAINER+=("${extra[@]}" "$image")
            ;;
        none) CONTAINER=() ;;
        *)
            echo "[autoexp] CONTAINER_RUNTIME must be apptainer, singularity or none, got '$runtime'" >&2
            return 2
            ;;
    esac
}
