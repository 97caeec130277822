"""What every script in scripts/ shares: shellcheck-clean, and bad arguments refused with a reason."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.scripts import REPO

SCRIPTS = sorted(p for p in (REPO / "scripts").iterdir() if p.is_file() and not p.name.startswith("."))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_shellcheck_clean(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is installed by scripts/bootstrap"
    proc = subprocess.run([shellcheck, str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("local-cluster", ["up", "--ssh-port", "22x"], "not a number: 22x"),
        ("local-cluster", ["up", "--bogus"], "unknown option: --bogus"),
        ("local-cluster", ["restart"], "unknown command: restart"),
        ("local-cluster", ["env", "--conn-id", "bad id"], "--conn-id must be letters"),
        ("local-cluster", ["env"], "no cluster in"),
        ("local-postgres", ["up", "--port", "54x"], "not a number: 54x"),
        ("local-postgres", ["up", "--bogus"], "unknown option: --bogus"),
        ("local-postgres", ["restart"], "unknown command: restart"),
        ("local-postgres", ["env", "--db", "Bad-Name"], "--db must be lower-case letters"),
        ("local-postgres", ["env"], "no server in"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, script: str, args: list[str], message: str) -> None:
    argv = [str(REPO / "scripts" / script), *args, "--dir", str(tmp_path)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode != 0
    assert message in proc.stderr
