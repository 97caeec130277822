"""Small hand-built jobs for the planner's pure-logic tests (the config engine's Job, minus expansion)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FakeJob:
    """Stand-in for `autoexp.config.Job` with the attributes the planner reads."""

    name: str
    params: Mapping[str, Any]
    template: Path | None = None
    output_file: str = "slurm.out"
    check_interval_secs: float = 60
    start_condition_cmd: str = ""
    termination_str: str = ""
    termination_cmd: str = ""
    lines: Mapping[str, int] = field(default_factory=dict)

    def origin(self, var: str) -> str:
        return f"camp.yaml:{self.lines.get(var, 1)}"


def campaign(
    exps: tuple[str, ...] = ("a", "b"),
    train_iters: int = 10,
    save_interval: int = 4,
    branches: Mapping[str, tuple[int, int]] | None = None,
    convert: bool = True,
) -> list[FakeJob]:
    """Jobs shaped like config/scaling_exps.yaml's: per experiment PRETRAIN and COOLDOWN x branch, each
    TRAIN + CONVERT_EVAL.

    `branches` maps a CD_SCALE label to (ITER, TRAIN_ITERS).
    """
    branches = {"s1": (4, 12), "s2": (8, 16)} if branches is None else branches
    jobs: list[FakeJob] = []
    modes = ("TRAIN", "CONVERT_EVAL") if convert else ("TRAIN",)
    for exp in exps:
        base = {"EXP_NAME": exp, "SAVE_INTERVAL": save_interval, "SEQ_LENGTH": 8, "GLOBAL_BATCH_SIZE": 2}
        for mode in modes:
            params = {
                **base,
                "PHASE": "PRETRAIN",
                "MODE": mode,
                "TRAIN_ITERS": train_iters,
                "RUN_DIR": f"/logs/{exp}",
                "TOTAL_TOKENS_NUM": train_iters * 16,
            }
            jobs.append(FakeJob(f"{exp}_PRETRAIN_{mode}", params))
        for label, (it, iters) in branches.items():
            for mode in modes:
                params = {
                    **base,
                    "PHASE": "COOLDOWN",
                    "MODE": mode,
                    "CD_SCALE": label,
                    "ITER": it,
                    "TRAIN_ITERS": iters,
                    "RUN_DIR": f"/logs/{exp}/cooldown_s{label}",
                    "TOTAL_TOKENS_THIS_PHASE": iters * 16,
                }
                jobs.append(FakeJob(f"{exp}_COOLDOWN{label}_{mode}", params, lines={"ITER": 42}))
    return jobs
