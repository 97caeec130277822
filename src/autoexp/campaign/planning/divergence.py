"""What a diverged training prints: the Slurm operator's fatal patterns for a training task.

A training whose log matches one is recorded DIVERGED and never resubmitted nor retried: resumed
from its last checkpoint with the same data and seed it diverges again, and every attempt would
cost the phase's whole GPU allocation. A user who changes the run (learning rate, seed) clears the
task, which starts afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

DIVERGED: Final = "DIVERGED"

# Regexes, each searched in every line of the ended job's log tail (slurm_operator.policy.resubmission).
MEGATRON_DIVERGED: Final[tuple[str, ...]] = (
    # Megatron-LM's iteration line (` iteration       37/    1200 | ... | lm loss: 2.500000E+00 | ...`)
    # with a loss of nan or inf: losses are formatted `{:.6E}`, which prints NAN, INF, -INF.
    # Not `loss scale:` (a separate key), nor `number of nan iterations:` (fp16 skips, not a divergence).
    r"(?i)\biteration\s+\d+\s*/\s*\d+\s*\|.*\bloss:\s*[-+]?(?:nan|inf)\b",
    # its validation line (` validation loss at iteration 100 | lm loss value: NAN | lm loss PPL: ...`)
    r"(?i)\bloss value:\s*[-+]?(?:nan|inf)\b",
    # Megatron-LM's NaN/Inf checks (--check-for-nan-in-loss-and-grad, on by default) when they end
    # the run: the assertion of older versions (`AssertionError: Rank 13: found NaN in local grad norm
    # in backward pass before data-parallel communication collective. ...`) and the rerun state
    # machine's error (`RuntimeError: Rank 0, ..., iteration 2: Unexpected result nan (message='found
    # NaN in local forward loss calculation')`). Only as an exception: the state machine's first
    # report of a NaN (a log line) is followed by a rerun that may call it a transient hardware fault,
    # which is worth resubmitting.
    r"(?:Error|Exception): .*found (?:NaN|Inf) in local (?:forward loss calculation|grad norm)",
)

# The SlurmOperator's ``fatal_patterns`` of a training task.
FATAL_PATTERNS: Final[Mapping[str, tuple[str, ...]]] = {DIVERGED: MEGATRON_DIVERGED}
