"""The expanded, resolved job: AutoExperiment's JobDef as a frozen value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoexp.config.builtins import BUILTIN_LINE, BUILTIN_ORIGIN

# AutoExperiment's JobDef fields: a param with one of these names is also a field of the job.
SPECIAL_KEYS = (
    "name",
    "template",
    "output_file",
    "cmd",
    "sbatch_script",
    "check_interval_secs",
    "start_condition_cmd",
    "termination_str",
    "termination_cmd",
)
MANDATORY_KEYS = ("name", "template", "output_file", "cmd", "sbatch_script")
DEFAULT_CHECK_INTERVAL_SECS = 900  # AutoExperiment's JobDef default (15 minutes)


@dataclass(frozen=True, eq=False)
class Job:
    """One job of the grid.

    Parameters:
        name: the unique job name (also the Slurm job name).
        params: every resolved variable, in AutoExperiment's order, with its type (str/int/float/bool).
        template: the sbatch template resolved against the config's folder (None if the config has none).
        sbatch_script, output_file, cmd, check_interval_secs, start_condition_cmd, termination_str,
        termination_cmd: AutoExperiment's JobDef fields (values as written, after substitution).
        index: position in expansion order (0-based).
        config_path: the config file the job comes from.
        lines: the line of the assignment that set each variable (``-f`` overrides are line 1 of
            ``<-f KEY=VALUE>``); ``source`` is the config file as shown in messages.
    """

    name: str
    params: Mapping[str, Any]
    template: Path | None
    sbatch_script: str
    output_file: str
    cmd: str
    check_interval_secs: int = DEFAULT_CHECK_INTERVAL_SECS
    start_condition_cmd: str = ""
    termination_str: str = ""
    termination_cmd: str = ""
    index: int = 0
    config_path: Path = Path("config.yaml")
    lines: Mapping[str, int] = field(default_factory=dict, repr=False)
    source: str = "config.yaml"
    overrides: tuple[str, ...] = ()

    def origin(self, var: str) -> str:
        """``file:line`` of the assignment that set ``var`` (KeyError if the job has no such variable)."""
        line = self.lines[var]
        if line == BUILTIN_LINE:
            return f"{BUILTIN_ORIGIN}:1"
        if line < 0:  # set by the -line'th -f override
            return f"<-f {self.overrides[-line - 1]}>:1"
        return f"{self.source}:{line}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Job):
            return NotImplemented
        return (self.name, dict(self.params), self.template) == (
            other.name,
            dict(other.params),
            other.template,
        )

    def __hash__(self) -> int:
        return hash(self.name)
