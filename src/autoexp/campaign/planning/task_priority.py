"""Which campaign task the scheduler starts first when task processes or pool slots are short.

Airflow's default rank is a task's count of downstream tasks, which puts a checkpoint wait above its
training (each wait leads to a conversion, the training to nothing). With the seed's 90 DAGs
triggered at once, ~2,800 wait starts then held every task process and no training was submitted in
7 minutes (docs/performance.md). The ranks below are absolute (``weight_rule="absolute"``): the run's
start first, then the Slurm work on the critical path, then conversions, then the waits, which only
defer and whose checkpoints come late anyway. Among equal ranks Airflow takes the earlier run, then
the lower map index: a phase's early checkpoints before its late ones.
"""

from __future__ import annotations

from typing import Final

STAGE: Final = 50
"""Uploads the run's scripts; every other task of the run waits for it."""
TRAIN: Final = 40
"""A phase's training: the campaign's critical path."""
BRANCH_WAIT: Final = 35
"""A cooldown's wait for its branch checkpoint: it gates that cooldown's training."""
CONVERT: Final = 30
"""A checkpoint's conversion and evaluation: its checkpoint is there, its slot is Slurm work."""
REPORT: Final = 20
"""The experiment's report, the run's last task."""
CHECKPOINT_WAIT: Final = 10
"""A checkpoint's wait: starts, defers, and is ended by the triggerer."""
