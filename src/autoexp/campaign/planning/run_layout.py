"""Every path of a run folder and of an experiment's staging folder, and the shell snippets reading them.

Built here and nowhere else; every value that reaches a shell is quoted here. A run folder is the
``RUN_DIR`` of one training (pretraining or a cooldown branch) as the shipped templates lay it out.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Sequence

from slurm_operator.model import naming

from autoexp.campaign.planning.checkpoint_layout import TRACKER_FILE

# The training template says CHECKPOINT_PATH="$RUN_DIR/checkpoints" (include/sbatch/
# train_container_simple.sh) and passes it to --save; tests/autoexp/campaign/planning/test_run_layout.py
# fails when the two part ways.
CHECKPOINTS_SUBDIR = "checkpoints"
# ckpt_check's record of its rollbacks, one line each, in the checkpoint folder (include/autoexp_cluster/
# ckpt_check.py ROLLBACKS; test_run_layout.py holds the two to one name), and the copy of the lines
# already alerted beside it.
ROLLBACKS_FILE = ".autoexp_rollbacks"
ALERTED_SUFFIX = ".alerted"
# Outcome markers a phase's training task leaves for its checkpoint waits (see operators).
FAILED, FINISHED, STOPPED = "failed", "finished", "stopped"


def _stem(path: str) -> str:
    base = posixpath.basename(path)
    return base.rsplit(".", 1)[0] if "." in base else base


# -- the run folder ----------------------------------------------------------------------------------


def checkpoint_dir(run_dir: str) -> str:
    """Megatron's ``--save`` folder of a run."""
    return f"{run_dir.rstrip('/')}/{CHECKPOINTS_SUBDIR}"


def tracker_path(checkpoints: str) -> str:
    """Megatron's tracker file inside a ``--save`` folder."""
    return f"{checkpoints.rstrip('/')}/{TRACKER_FILE}"


def rollbacks_path(checkpoints: str) -> str:
    """ckpt_check's rollback record inside a ``--save`` folder."""
    return f"{checkpoints.rstrip('/')}/{ROLLBACKS_FILE}"


def done_marker(run_dir: str, iteration: int) -> str:
    """The convert+eval template's marker of a converted and evaluated checkpoint (un-padded iteration)."""
    return f"{run_dir.rstrip('/')}/converted_checkpoints/iter_{int(iteration)}.done"


def eval_results_dir(run_dir: str) -> str:
    """Where the evaluator writes lm-eval's results, one folder per checkpoint."""
    return f"{run_dir.rstrip('/')}/eval_results"


def results_template(run_dir: str) -> str:
    """``results_path`` as a ``str.format`` template with an ``{iteration}`` field (braces escaped)."""
    escaped = eval_results_dir(run_dir).replace("{", "{{").replace("}", "}}")
    return escaped + "/iter_{iteration}/results.json"


def results_path(run_dir: str, iteration: int) -> str:
    """lm-eval's results of one checkpoint."""
    return results_template(run_dir).format(iteration=int(iteration))


def report_dir(run_dir: str) -> str:
    """Where the report task writes its table and plots (pretraining's run folder)."""
    return f"{run_dir.rstrip('/')}/report"


def train_output(output_file: str, run_dir: str) -> str:
    """A training's ``--output`` pattern: one log per attempt next to the YAML's ``output_file``."""
    return f"{posixpath.dirname(output_file) or run_dir}/{_stem(output_file) or 'train'}-%j.out"


def attempt_logs(pattern: str, names: Sequence[str]) -> list[str]:
    """The logs of every attempt ever made of a training, oldest job first: the files of its folder
    (``names``) that its ``train_output`` ``pattern`` yields for some job id."""
    folder, base = posixpath.split(pattern)
    head, _, tail = base.partition("%j")
    jobs = sorted(
        (int(middle), name)
        for name in names
        if name.startswith(head)
        and name.endswith(tail)
        and (middle := name[len(head) : len(name) - len(tail)]).isdigit()
    )
    return [f"{folder}/{name}" for _, name in jobs]


def convert_output(output_file: str, run_dir: str, iteration: int) -> str:
    """A checkpoint's conversion ``--output`` pattern: one log per iteration and attempt."""
    stem = _stem(output_file) or "convert"
    return f"{posixpath.dirname(output_file) or run_dir}/{stem}-iter{int(iteration)}-%j.out"


def convert_batch_output(output_file: str, run_dir: str) -> str:
    """The ``--output`` pattern of a phase's shared conversion job (``airflow.share_conversion_jobs``):
    one per phase, so that every task adopting the job reads the same log (and its cancel marker)."""
    stem = _stem(output_file) or "convert"
    return f"{posixpath.dirname(output_file) or run_dir}/{stem}-batch-%j.out"


def script_copy(output_file: str, job_name: str) -> str:
    """The rendered script's copy next to the job's log (as AutoExperiment leaves it); "" without a folder."""
    log_dir = posixpath.dirname(output_file)
    return f"{log_dir}/{job_name}.sbatch" if log_dir else ""


# -- the staging folder (``airflow.remote_dir``) -----------------------------------------------------


def script_path(remote_dir: str, job_name: str) -> str:
    """Where stage uploads a job's rendered sbatch script."""
    return f"{remote_dir.rstrip('/')}/scripts/{job_name}.sbatch"


def state_dir(remote_dir: str) -> str:
    """Folder of the outcome markers inside an experiment's staging folder."""
    return posixpath.join(remote_dir, "state")


def submit_lock(remote_dir: str) -> str:
    """The file every Slurm task of an experiment locks around "is its job running? else sbatch"."""
    return f"{remote_dir.rstrip('/')}/locks/submit.lock"


def outcome_path(states: str, run_id: str, phase: str, outcome: str) -> str:
    """Marker the phase's training task leaves on the cluster: ``<state_dir>/<run>/<phase>.<outcome>``."""
    return f"{states.rstrip('/')}/{naming.sanitize(run_id)}/{phase}.{outcome}"


# -- shell snippets ------------------------------------------------------------------------------------


def tracker_value(checkpoints: str) -> str:
    """Print the tracker's content (the progress probe: it changes whenever a checkpoint is saved)."""
    return f"cat {shlex.quote(tracker_path(checkpoints))} 2>/dev/null || echo none"


def tracker_reached(checkpoints: str, iteration: int) -> str:
    """Print 1 when the tracker names an iteration >= ``iteration`` (training really done), else 0.

    Read as ``checkpoint_layout.parse_tracker`` and ``autoexp_tracker`` (include/helpers/ckpt_lib.sh)
    read it: ASCII digits between optional whitespace; tests/include/test_tracker.py holds all three
    to one table.
    """
    path = shlex.quote(tracker_path(checkpoints))
    return (
        f"t=$(cat {path} 2>/dev/null); "
        f't="${{t#"${{t%%[![:space:]]*}}"}}"; t="${{t%"${{t##*[![:space:]]}}"}}"; '  # trimmed
        f'case "$t" in ""|*[!0-9]*) echo 0 ;; '
        f'*) if [ "$t" -ge {int(iteration)} ]; then echo 1; else echo 0; fi ;; esac'
    )


def training_done(checkpoints: str, train_iters: int, also: str = "") -> str:
    """Print 1 when the tracker reached ``train_iters`` and ``also`` (the YAML's own check, if any)
    prints 1, else 0: a training's completion command."""
    return done_when_all_done([tracker_reached(checkpoints, train_iters), *([also] if also else [])])


def rollbacks_unalerted(checkpoints: str, *, claim: bool) -> str:
    """Print the lines of ckpt_check's rollback record not alerted yet (nothing without a record).

    ``claim``: also append them to the ``.alerted`` copy beside it, under ``flock`` on that copy, in
    the same command: of two callers (a retry, a sweep's run sharing the job) one prints them. A line
    is the whole record of one rollback (its time, checkpoint, new name, why, where it resumed):
    unique, so a record reset by hand (for the rollback limit) brings back no old line. Exits 0
    unless a file cannot be read or written.
    """
    record = shlex.quote(rollbacks_path(checkpoints))
    alerted = shlex.quote(rollbacks_path(checkpoints) + ALERTED_SUFFIX)
    # The lines of the second file that are not empty and not in the first (FILENAME, not NR == FNR:
    # the first file may be empty).
    new = shlex.quote('FILENAME == ARGV[1] { seen[$0] = 1; next } $0 != "" && !($0 in seen)')
    if not claim:
        return (
            f'if [ -s {record} ]; then a={alerted}; [ -e "$a" ] || a=/dev/null; awk {new} "$a" {record}; fi'
        )
    return (
        f"if [ -s {record} ]; then exec 9>>{alerted} && flock 9 && n=$(awk {new} {alerted} {record}) && "
        f'if [ -n "$n" ]; then printf \'%s\\n\' "$n" | tee -a {alerted}; fi; fi'
    )


def marker_exists(run_dir: str, iteration: int) -> str:
    """Print 1 when the checkpoint's done marker and its results exist, else 0."""
    marker, results = (
        shlex.quote(done_marker(run_dir, iteration)),
        shlex.quote(results_path(run_dir, iteration)),
    )
    return f"if [ -e {marker} ] && [ -s {results} ]; then echo 1; else echo 0; fi"


def done_when_all_done(commands: list[str]) -> str:
    """Print 1 only when every command prints 1 (each run by its own bash, so any syntax is safe)."""
    if len(commands) == 1:
        return commands[0]
    tests = " && ".join(f'[ "$(bash -c {shlex.quote(c)})" = 1 ]' for c in commands)
    return f"if {tests}; then echo 1; else echo 0; fi"


def remove_file(*paths: str) -> str:
    """Remove files if they exist (never fails)."""
    return "rm -f -- " + " ".join(shlex.quote(p) for p in paths)
