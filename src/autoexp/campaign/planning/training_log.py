"""What a training's log prints that never says why it ended: torchrun's shutdown report.

A rank that raises makes torchrun stop the others (``W... torch/distributed/elastic/...`` lines),
print its own traceback ending in ``ChildFailedError`` and a failure table (``Root Cause (first
observed failure)``), then srun reports the step's exit code. The Slurm plugin's error-line picking
(``slurm_operator.policy.error_lines``) leaves these out with the patterns below, so that an alert shows
the line that ended the job (``AssertionError: found NaN in local grad norm``, ``loss is nan``, a
checkpoint that ``is unreadable``) and the trainer's lines before it.
"""

from __future__ import annotations

from typing import Final

from slurm_operator.policy.error_lines import GENERIC

TORCHRUN_BOILERPLATE: Final[tuple[str, ...]] = (
    # torch's elastic agent logs (glog style, and the logging module's default format)
    r"^(?:\[[^\]\n]*\]:?[ \t]?)?[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S*torch/distributed/.*$",
    r"^(?:INFO|WARNING|ERROR):torch\.distributed\..*$",
    r"^\*{5,}\n(?:Setting OMP_NUM_THREADS.*\n)+\*{5,}$",
    # the launcher's own traceback: its indented frames (its header too, when the text has it) up to
    # its ChildFailedError; a cut-off start (a window of the last lines) is still matched
    # (one whitespace character, then anything: ``[ \t]+.*`` would split each indented line in as
    # many ways as it has leading blanks, and a tail without the error backtracks exponentially)
    r"^(?:Traceback \(most recent call last\):\n)?(?:[ \t].*\n)*?"
    r"torch\.distributed\.elastic\.multiprocessing\.errors\.ChildFailedError:.*$",
    # its failure table
    r"^={20,}[ \t]*$",
    r"^-{20,}[ \t]*$",
    r"^\S+ FAILED[ \t]*$",
    r"^Failures:[ \t]*$",
    r"^[ \t]*<NO_OTHER_FAILURES>[ \t]*$",
    r"^Root Cause \(first observed failure\):[ \t]*$",
    r"^\[\d+\]:[ \t]*$",
    r"^[ \t]+(?:time|host|rank|exitcode|error_file|traceback)[ \t]*: .*$",
)

TRAINING_LOG: Final = GENERIC.with_boilerplate(TORCHRUN_BOILERPLATE)

# Megatron-LM's progress line (``training_log``: `` iteration       37/    1200 | ...``; our CPU
# trainer prints the same): group 1 is the iteration, the training's progress for hang detection.
# A validation line (``validation loss at iteration 40 | ...``) has no ``/ total`` and does not match.
ITERATION_PROGRESS: Final = r"\biteration\s+(\d+)\s*/\s*\d+\s*\|"
