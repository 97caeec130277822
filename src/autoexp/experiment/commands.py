"""Shell snippets for the seed's on-disk layout (tracker, markers), every value quoted here and only here."""

from __future__ import annotations

import shlex

TRACKER = "latest_checkpointed_iteration.txt"


def tracker_path(checkpoint_dir: str) -> str:
    """Megatron's tracker file inside a ``--save`` folder."""
    return f"{checkpoint_dir.rstrip('/')}/{TRACKER}"


def tracker_value(checkpoint_dir: str) -> str:
    """Print the tracker's content (the progress probe: it changes whenever a checkpoint is saved)."""
    return f"cat {shlex.quote(tracker_path(checkpoint_dir))} 2>/dev/null || echo none"


def tracker_reached(checkpoint_dir: str, iteration: int) -> str:
    """Print 1 when the tracker names an iteration >= ``iteration`` (training really done), else 0."""
    path = shlex.quote(tracker_path(checkpoint_dir))
    return (
        f't=$(cat {path} 2>/dev/null); case "$t" in ""|*[!0-9]*) echo 0 ;; '
        f'*) if [ "$t" -ge {int(iteration)} ]; then echo 1; else echo 0; fi ;; esac'
    )


def done_marker(run_dir: str, iteration: int) -> str:
    """The seed's marker of a converted and evaluated checkpoint (un-padded iteration)."""
    return f"{run_dir.rstrip('/')}/converted_checkpoints/iter_{int(iteration)}.done"


def results_path(run_dir: str, iteration: int) -> str:
    """Where the evaluator writes lm-eval's results for one checkpoint (the seed's layout)."""
    return f"{run_dir.rstrip('/')}/eval_results/iter_{int(iteration)}/results.json"


def marker_exists(run_dir: str, iteration: int) -> str:
    """Print 1 when the checkpoint's done marker and its results exist, else 0."""
    marker, results = (
        shlex.quote(done_marker(run_dir, iteration)),
        shlex.quote(results_path(run_dir, iteration)),
    )
    return f"if [ -e {marker} ] && [ -s {results} ]; then echo 1; else echo 0; fi"


def all_say_one(commands: list[str]) -> str:
    """Print 1 only when every command prints 1 (each run by its own bash, so any syntax is safe)."""
    if len(commands) == 1:
        return commands[0]
    tests = " && ".join(f'[ "$(bash -c {shlex.quote(c)})" = 1 ]' for c in commands)
    return f"if {tests}; then echo 1; else echo 0; fi"


def remove_file(*paths: str) -> str:
    """Remove files if they exist (never fails)."""
    return "rm -f -- " + " ".join(shlex.quote(p) for p in paths)
