"""What a diverged training prints: the Slurm operator's fatal patterns for a training task.

A training whose log matches one is recorded DIVERGED and never resubmitted nor retried: resumed
from its last checkpoint with the same data and seed it diverges again, and every attempt would
cost the phase's whole GPU allocation. A user who changes the run (learning rate, seed) clears the
task, which starts afresh.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from autoexp.campaign.planning.loss_spike import LossSpikeSettings
from autoexp.campaign.planning.training_log import ITERATION_PROGRESS

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


# ---- a dead model: the loss of a uniform guess, no gradient --------------------------------------
# A model whose weights blew up and collapsed (LR 1e3 on the demo: loss 1e6, then 5.950642 = ln 384
# with grad norm 0.000) prints no NaN and would train to the end, be converted and be evaluated at
# every checkpoint. Its logits are equal over the (padded) vocabulary, so its loss is ln(vocabulary).
DEAD_MODEL: Final = DIVERGED
# Consecutive iteration lines at that loss with zero grad norm before it is called dead: a healthy
# start prints ~ln(vocabulary) too, but never with grad norm 0.000 (Megatron-LM prints it `{:.3f}`).
DEAD_MODEL_INTERVALS: Final = 5
# How far (nats) the printed loss may be from ln(padded vocabulary): bf16 logits round, fp32 do not.
UNIFORM_TOLERANCE: Final = 0.02
# Megatron-LM's default --make-vocab-size-divisible-by.
VOCAB_DIVISIBLE_BY: Final = 128


@dataclass(frozen=True)
class RepeatedRule:
    """A fatal rule that needs ``repeat`` consecutive matching lines of ``pattern`` (one a log interval)."""

    name: str
    pattern: str
    repeat: int

    def to_spec(self) -> dict[str, Any]:
        """The Slurm operator's form of a repeated fatal pattern."""
        return {"pattern": self.pattern, "repeats": self.repeat}


def padded_vocab(vocab_size: int, divisible_by: int = VOCAB_DIVISIBLE_BY, tensor_parallel: int = 1) -> int:
    """Megatron-LM's output layer size: the vocabulary rounded up to ``divisible_by`` x TP."""
    multiple = divisible_by * tensor_parallel
    return -(-vocab_size // multiple) * multiple


def loss_value_regex(low: float, high: float) -> str:
    """A regex for a loss printed ``{:.6E}`` (``5.950642E+00``) between ``low`` and ``high`` (> 0), to
    four significant digits: one alternative per printed four-digit prefix in the range."""
    alternatives: list[str] = []
    value = low
    while value <= high:
        exponent = math.floor(math.log10(value))
        digits = math.floor(value / 10.0 ** (exponent - 3) + 1e-9)  # 1000..9999
        sign = "+" if exponent >= 0 else "-"
        alternatives.append(rf"{digits // 1000}\.{digits % 1000:03d}\d*E\{sign}{abs(exponent):02d}")
        value = (digits + 1) * 10.0 ** (exponent - 3)
    return "(?:" + "|".join(alternatives) + ")"


def dead_model_rule(
    vocab_size: int,
    *,
    tensor_parallel: int = 1,
    divisible_by: int = VOCAB_DIVISIBLE_BY,
    intervals: int = DEAD_MODEL_INTERVALS,
) -> RepeatedRule:
    """The iteration line of a dead model: loss within ``UNIFORM_TOLERANCE`` of ln(padded vocabulary)
    and grad norm 0.000, ``intervals`` times in a row."""
    if vocab_size < 2 or intervals < 1:
        raise ValueError(
            f"dead_model_rule: vocab_size {vocab_size} and intervals {intervals} must be >= 2, >= 1"
        )
    uniform = math.log(padded_vocab(vocab_size, divisible_by, tensor_parallel))
    loss = loss_value_regex(uniform - UNIFORM_TOLERANCE, uniform + UNIFORM_TOLERANCE)
    pattern = rf"\biteration\s+\d+\s*/\s*\d+\s*\|.*\bloss:\s*{loss}\s*\|.*\bgrad norm:\s*0\.0+\s*\|"
    return RepeatedRule(DEAD_MODEL, pattern, intervals)


# The job variables the dead model's rule reads: the config cache keeps them for every job.
READS: Final[tuple[str, ...]] = ("VOCAB_SIZE", "TP")


def dead_model_rule_of(params: Mapping[str, Any]) -> RepeatedRule | None:
    """``dead_model_rule`` for a training job's variables (``VOCAB_SIZE``, ``TP``); None without a
    usable ``VOCAB_SIZE`` (no uniform level to compare with)."""
    try:
        vocab = int(params["VOCAB_SIZE"])
        tp = int(params.get("TP", 1) or 1)
    except (KeyError, TypeError, ValueError):
        return None
    return dead_model_rule(vocab, tensor_parallel=tp) if vocab >= 2 and tp >= 1 else None


def first_repeated_match(rule: RepeatedRule, text: str) -> tuple[int, str] | None:
    """(line number, line) where ``rule`` is first met: its ``repeat``-th consecutive matching iteration
    line (another iteration line breaks the run; other lines, such as a checkpoint save, do not)."""
    compiled, progress = re.compile(rule.pattern), re.compile(ITERATION_PROGRESS)
    run = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if compiled.search(line):
            run += 1
            if run >= rule.repeat:
                return number, line.strip()
        elif progress.search(line):
            run = 0
    return None


# ---- a loss spike (airflow.loss_spike, off by default) -------------------------------------------
# Megatron-LM's iteration line's training loss (`` iteration 37/ 1200 | ... | lm loss: 2.500000E+00 |``):
# group 1 the value (NAN and INF too). Not the validation line's ``lm loss value:``.
MEGATRON_LOSS: Final = r"\biteration\s+\d+\s*/\s*\d+\s*\|.*\blm loss:\s*([^\s|]+)\s*\|"


def loss_spike_rule(spike: LossSpikeSettings) -> dict[str, Any] | None:
    """The Slurm operator's ``above_median`` pattern for ``airflow.loss_spike``; None when it is off."""
    if not spike.enabled:
        return None
    factor, intervals, window = float(spike.factor), spike.intervals, spike.window
    return {"pattern": MEGATRON_LOSS, "above_median": factor, "repeats": intervals, "window": window}


def fatal_patterns_of(
    params: Mapping[str, Any], spike: LossSpikeSettings | None = None
) -> dict[str, list[str | dict[str, Any]]]:
    """A training's ``fatal_patterns``: ``FATAL_PATTERNS`` and, when its ``VOCAB_SIZE`` is known, the
    dead model's rule (checked while the job runs: it is cancelled at the ``repeat``-th flat line),
    and ``spike``'s loss-spike rule when it is on."""
    patterns: list[str | dict[str, Any]] = list(MEGATRON_DIVERGED)
    dead = dead_model_rule_of(params)
    if dead is not None:
        patterns.append(dead.to_spec())
    spike_rule = None if spike is None else loss_spike_rule(spike)
    if spike_rule is not None:
        patterns.append(spike_rule)
    return {DIVERGED: patterns}
