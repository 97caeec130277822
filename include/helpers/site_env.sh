#!/bin/bash
# Site settings of both sbatch templates (include/sbatch/): the YAML's MODULES and JOB_ENV, applied in
# the job, never taken from the login shell. Sourced, never executed.

# autoexp_site_env MODULES JOB_ENV: `module load` each of MODULES (space-separated), then export each
# NAME=VALUE word of JOB_ENV. Returns 2, with one line saying what failed, on a module that does not
# load or a word that is not NAME=VALUE.
autoexp_site_env() {
    local modules="$1" env_words="$2" word
    local -a names words
    read -r -a names <<< "$modules"
    if [ "${#names[@]}" -gt 0 ]; then
        if ! command -v module >/dev/null 2>&1; then
            echo "[autoexp] MODULES is set (${names[*]}) but this node has no 'module' command" >&2
            return 2
        fi
        module load "${names[@]}" || {
            echo "[autoexp] module load ${names[*]} failed (the YAML's MODULES)" >&2
            return 2
        }
    fi
    read -r -a words <<< "$env_words"
    for word in "${words[@]}"; do
        if ! [[ "$word" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then
            echo "[autoexp] JOB_ENV word '$word' is not NAME=VALUE" >&2
            return 2
        fi
        export "${word?}"
    done
}
