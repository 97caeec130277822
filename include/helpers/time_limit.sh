#!/bin/bash
# The job's time limit for the training template: when the trainer must stop on its own, before Slurm
# stops it. Sourced, never executed.

# Print Slurm time limit $1 (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS, as sbatch --time
# reads it) in seconds; print nothing for UNLIMITED/infinite or a value it cannot read.
autoexp_time_seconds() {
    local t="$1" days=0 h=0 m=0 s=0 rest
    case "$t" in UNLIMITED|unlimited|infinite|INFINITE|"") return 0 ;; esac
    if [[ "$t" =~ ^([0-9]+)-(.*)$ ]]; then
        days=$((10#${BASH_REMATCH[1]})); rest="${BASH_REMATCH[2]}"
        if [[ "$rest" =~ ^([0-9]+)$ ]]; then h=$((10#$rest))
        elif [[ "$rest" =~ ^([0-9]+):([0-9]+)$ ]]; then h=$((10#${BASH_REMATCH[1]})); m=$((10#${BASH_REMATCH[2]}))
        elif [[ "$rest" =~ ^([0-9]+):([0-9]+):([0-9]+)$ ]]; then
            h=$((10#${BASH_REMATCH[1]})); m=$((10#${BASH_REMATCH[2]})); s=$((10#${BASH_REMATCH[3]}))
        else return 0; fi
    elif [[ "$t" =~ ^([0-9]+)$ ]]; then m=$((10#$t))
    elif [[ "$t" =~ ^([0-9]+):([0-9]+)$ ]]; then m=$((10#${BASH_REMATCH[1]})); s=$((10#${BASH_REMATCH[2]}))
    elif [[ "$t" =~ ^([0-9]+):([0-9]+):([0-9]+)$ ]]; then
        h=$((10#${BASH_REMATCH[1]})); m=$((10#${BASH_REMATCH[2]})); s=$((10#${BASH_REMATCH[3]}))
    else return 0; fi
    echo $(( days * 86400 + h * 3600 + m * 60 + s ))
}

# Print the --exit-duration-in-mins for a trainer started now: time limit $1 minus the $3 seconds the
# job has already run minus margin $2 minutes, rounded down. Megatron-LM takes an integer and treats 0
# as "off", so nothing is printed when less than one minute would be left.
autoexp_exit_minutes() {
    local limit margin="$2" elapsed="${3:-0}" left
    limit="$(autoexp_time_seconds "$1")"
    [ -n "$limit" ] || return 0
    left=$(( (limit - elapsed) / 60 - margin ))
    if [ "$left" -ge 1 ]; then echo "$left"; fi
}
