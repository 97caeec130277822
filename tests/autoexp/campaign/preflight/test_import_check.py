"""doctor's tool import check, run through a local bash as the cluster's login shell would."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from autoexp.campaign.preflight import doctor, tool_stage

pytestmark = pytest.mark.ml


@dataclass
class _Result:
    exit_status: int
    stdout: str
    stderr: str


class _LocalShell:
    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> _Result:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
        return _Result(done.returncode, done.stdout, done.stderr)


def _probe(python: str) -> doctor.Probe:
    return doctor.Probe((), "/tmp", "none", "", "", python, ())


def _staged(root: Path) -> Path:
    folder = Path(tool_stage.tool_dir(str(root), "abc"))
    folder.mkdir(parents=True)
    (folder / tool_stage.COMPLETE).write_text("")
    include = Path(__file__).resolve().parents[4] / "include" / "autoexp_cluster"
    (folder / "autoexp_cluster").symlink_to(include)
    return folder


def test_the_tools_import_with_an_interpreter_that_has_every_job_dependency(tmp_path: Path) -> None:
    _staged(tmp_path)
    check = doctor.import_check(_LocalShell(), _probe(sys.executable), str(tmp_path), "abc")
    assert check.ok, check.line()


def test_an_interpreter_without_megatron_core_fails_naming_it(tmp_path: Path) -> None:
    # A conversion job compares its export with megatron-core's forward pass: without megatron-core
    # every conversion of the campaign would fail, so doctor says so before the first one.
    folder = _staged(tmp_path)
    (folder / "megatron").mkdir()
    (folder / "megatron" / "__init__.py").write_text("raise ImportError('No module named megatron.core')\n")
    check = doctor.import_check(_LocalShell(), _probe(sys.executable), str(tmp_path), "abc")
    assert not check.ok
    assert "No module named megatron.core" in check.detail, check.line()
    assert "megatron-core" in check.detail, check.line()
