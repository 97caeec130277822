"""A training's error lines: torchrun's and srun's shutdown report left out, the line that ended the
job shown (real-looking tails of a Megatron NaN, a toy trainer's NaN loss, an unreadable checkpoint)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from slurm_operator.policy.error_lines import GAP, GENERIC, error_lines

from autoexp.campaign.planning.training_log import ITERATION_PROGRESS, TRAINING_LOG

# A stand-in trainer that logs a NaN loss and asserts, under the real torchrun of this venv (Python
# 3.11: its tracebacks have caret lines) and srun: the shape tests/e2e/test_failed_trainings.py runs.
REAL = "torchrun_py311.log"
NAN_ITERATION = "iteration 120/400 | lm loss: nan | grad norm: nan | number of nan iterations: 1 |"

DATA = Path(__file__).parent / "data" / "training_logs"
NAN = (
    "[rank0]: AssertionError: found NaN in local grad norm in backward pass before data-parallel "
    "communication collective. Device: 0, node: node001"
)
UNREADABLE = (
    "[rank0]: RuntimeError: /scratch/runs/exp/checkpoints/iter_0000300/mp_rank_00/model_optim_rng.pt "
    "is unreadable, not a torch.save file"
)


@pytest.mark.parametrize(
    ("log", "last", "expected"),
    [
        (
            "loss_nan.log",
            20,
            [
                "iteration 118/400 loss 2.913",
                "iteration 119/400 loss 2.907",
                "iteration 120/400 loss nan",
                "loss is nan at iteration 120: stopping",
            ],
        ),
        # the first error line and the error lines right after it
        ("loss_nan.log", 1, ["iteration 120/400 loss nan", "loss is nan at iteration 120: stopping"]),
        ("loss_nan.log", 0, ["iteration 120/400 loss nan", "loss is nan at iteration 120: stopping"]),
        # Megatron's "number of nan iterations: 0" is no error: the first error line is rank 0's assertion
        (
            "nan_assertion.log",
            2,
            [
                NAN,
                GAP,
                "[rank1]:     pretrain(",
                NAN.replace("rank0", "rank1").replace("Device: 0", "Device: 1"),
            ],
        ),
        (
            "unreadable_checkpoint.log",
            3,
            [
                '[rank0]:   File "/opt/megatron/megatron/training/checkpointing.py", line 1021, '
                "in load_checkpoint",
                "[rank0]:     state_dict = torch.load(checkpoint_name, map_location='cpu')",
                UNREADABLE,
            ],
        ),
    ],
)
def test_the_error_lines_of_a_training(log: str, last: int, expected: list[str]) -> None:
    assert error_lines((DATA / log).read_text(), TRAINING_LOG, last) == expected


@pytest.mark.parametrize("log", ["loss_nan.log", "nan_assertion.log", "unreadable_checkpoint.log", REAL])
def test_no_launcher_line_is_left_and_the_cause_is_first(log: str) -> None:
    text = (DATA / log).read_text()
    shown = "\n".join(error_lines(text, TRAINING_LOG))
    noises = ("torch.distributed", "ChildFailedError", "Root Cause", "srun:", "=====", "exitcode", "torchrun")
    for noise in noises:
        assert noise not in shown, (noise, shown)
    # srun's patterns alone hide no torchrun line, but the cause still comes first
    generic = error_lines(text, GENERIC)
    assert "Root Cause (first observed failure):" in generic
    assert ("nan" in generic[0].lower()) or ("unreadable" in generic[0]), generic[0]


def test_a_real_torchrun_tail() -> None:
    iteration = "iteration {}/400 | lm loss: {:.4f} | grad norm: 0.98 | number of nan iterations: 0 |"
    shown = error_lines((DATA / REAL).read_text(), TRAINING_LOG, 10)
    assert shown == [
        *(iteration.format(i, 3.1 - i / 1000) for i in (118, 119)),
        NAN_ITERATION,
        "Traceback (most recent call last):",
        '  File "/opt/train/nan_train.py", line 11, in <module>',
        '    check(float("nan"))',
        '  File "/opt/train/nan_train.py", line 8, in check',
        '    assert loss == loss, "found NaN in loss at iteration 120"',
        "           ^^^^^^^^^^^^",
        "AssertionError: found NaN in loss at iteration 120",
    ]


def test_picking_again_from_a_window_of_srun_picked_lines() -> None:
    """The alert picks from the operator's error: its window (srun's patterns only) starts inside
    torchrun's traceback, and still no launcher line is left, nor a second gap."""
    window = "\n".join(error_lines((DATA / REAL).read_text(), GENERIC))
    assert window.startswith(f"{NAN_ITERATION}\n{GAP}\n    return launch_agent(\n"), window
    assert error_lines(window, TRAINING_LOG) == [NAN_ITERATION]


@pytest.mark.parametrize(
    ("line", "iteration"),
    [
        # Megatron-LM's training_log and our CPU trainer's (include/autoexp_cluster/trainer.py)
        (" [2026-12-03 08:00:00] iteration       37/    1200 | consumed samples: 148 | lm loss: 2.5 |", 37),
        (" iteration     1200/    1200 | elapsed time per iteration (ms): 91.2 |", 1200),
        (" validation loss at iteration 40 | lm loss value: 5.9E+00 |", None),
        ("  successfully saved checkpoint from iteration      40 to /ckpt", None),
    ],
)
def test_the_iteration_progress_pattern_reads_the_training_line_only(
    line: str, iteration: int | None
) -> None:
    m = re.search(ITERATION_PROGRESS, line)
    assert (int(m.group(1)) if m else None) == iteration
