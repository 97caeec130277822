"""Helpers for config-engine tests: write a config (and templates) into a temp folder and load it."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from autoexp.config import Job, expand, load_config

DATA = Path(__file__).parent / "data"

MINIMAL_HEAD = """\
cmd: "sbatch {sbatch_script}"
template: t.sbatch
sbatch_script: "s/{name}.sbatch"
output_file: "o/{name}.out"
"""

WriteConfig = Callable[..., Path]


@pytest.fixture
def write_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteConfig:
    """Write YAML text (dedented) as tmp/config.yaml with a default template; return its path.

    The working directory moves to tmp so error messages name `config.yaml`.
    """
    monkeypatch.chdir(tmp_path)

    def write(text: str, template: str = "#SBATCH --job-name={name}\n", head: bool = False) -> Path:
        body = textwrap.dedent(text)
        path = tmp_path / "config.yaml"
        path.write_text((MINIMAL_HEAD if head else "") + body)
        (tmp_path / "t.sbatch").write_text(template)
        return path

    return write


@pytest.fixture
def jobs_of(write_config: WriteConfig) -> Callable[..., list[Job]]:
    """Expand YAML text (with the minimal special keys prepended) into jobs."""

    def run(text: str, overrides: tuple[str, ...] = ()) -> list[Job]:
        return expand(load_config(write_config(text, head=True), overrides))

    return run
