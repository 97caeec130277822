"""The layer rules: import-linter's contracts (pyproject.toml) hold, and each breaks on a forbidden import.

Also: the generic Slurm plugin never names Megatron (a user must be able to lift it out).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TREES = ("src", "plugins", "include")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """Run the contracts of ``root``/pyproject.toml over the packages under ``root`` (they come first on
    the path, before the editable install's)."""
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(str(root / t) for t in TREES)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_contract_is_kept() -> None:
    out = lint_imports(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"Contracts: (\d+) kept, 0 broken", out.stdout), out.stdout
    assert "Contracts: 5 kept" in out.stdout  # a contract dropped from pyproject.toml fails here


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("src/autoexp/config/errors.py", "import airflow.sdk", "config imports no Airflow"),
        ("src/autoexp/config/errors.py", "import slurm_operator.model.states", "config imports no Airflow"),
        (
            "plugins/slurm_operator/model/states.py",
            "import autoexp.config",
            "the Slurm plugin imports nothing",
        ),
        ("include/autoexp_cluster/corpus.py", "import airflow", "cluster tools import no Airflow"),
        (
            "src/autoexp/campaign/planning/__init__.py",
            "import airflow.sdk",
            "campaign planning imports no Airflow",
        ),
        ("src/autoexp/config/errors.py", "import autoexp.campaign.dags", "dags over planning over config"),
        # The UI plugin's app beside the DAGs: neither imports the other, planning imports neither.
        ("src/autoexp/campaign/ui/pages.py", "import autoexp.campaign.dags.factory", "dags over planning"),
        (
            "src/autoexp/campaign/planning/__init__.py",
            "import autoexp.campaign.ui.pages",
            "dags over planning",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, statement: str, contract: str
) -> None:
    for tree in TREES:
        shutil.copytree(
            REPO / tree, tmp_path / tree, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with (tmp_path / module).open("a") as fh:
        fh.write(f"\n{statement}  # added by the test\n")
    out = lint_imports(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    broken = [line for line in out.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(contract in line for line in broken), out.stdout


def test_the_slurm_plugin_never_names_megatron() -> None:
    hits = [
        f"{path.relative_to(REPO)}:{n}"
        for path in sorted((REPO / "plugins").rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if "megatron" in line.lower()
    ]
    assert hits == []
