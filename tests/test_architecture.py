"""The layer rules: import-linter's contracts (pyproject.toml) hold, and each breaks on a forbidden import.

Also: the generic Slurm plugin never names Megatron (a user must be able to lift it out), and only its
compat module imports Airflow's private API.
"""

from __future__ import annotations

import ast
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
    assert "Contracts: 8 kept" in out.stdout  # a contract dropped from pyproject.toml fails here


CAMPAIGN = "src/autoexp/campaign"
PLUGIN = "plugins/slurm_operator"
PURE = "campaign planning, configs, report and preflight import no Airflow"


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        ("src/autoexp/config/errors.py", "import airflow.sdk", "config imports no Airflow"),
        ("src/autoexp/config/errors.py", "import slurm_operator.model.states", "config imports no Airflow"),
        ("src/autoexp/config/errors.py", "import autoexp.cli.main", "config imports no Airflow"),
        (f"{PLUGIN}/model/states.py", "import autoexp.config", "the Slurm plugin imports nothing"),
        ("include/autoexp_cluster/corpus.py", "import airflow", "cluster tools import no Airflow"),
        # The campaign's pure side imports no Airflow, directly or through the plugin's hooks.
        (f"{CAMPAIGN}/planning/__init__.py", "import airflow.sdk", PURE),
        (f"{CAMPAIGN}/configs/__init__.py", "import slurm_operator.hooks.slurm", PURE),
        # Campaign layers: planning imports neither configs nor report; report and preflight over
        # configs, and not each other; the Airflow side over all; nothing imports the cli.
        ("src/autoexp/config/errors.py", "import autoexp.campaign.dags", "campaign layers"),
        (f"{CAMPAIGN}/planning/__init__.py", "import autoexp.campaign.configs.cache", "campaign layers"),
        (f"{CAMPAIGN}/planning/__init__.py", "import autoexp.campaign.report.report_data", "campaign layers"),
        (f"{CAMPAIGN}/configs/__init__.py", "import autoexp.campaign.report.report_data", "campaign layers"),
        (f"{CAMPAIGN}/report/__init__.py", "import autoexp.campaign.preflight.doctor", "campaign layers"),
        (f"{CAMPAIGN}/report/__init__.py", "import autoexp.campaign.triggerer.ti_states", "campaign layers"),
        (f"{CAMPAIGN}/triggerer/__init__.py", "import autoexp.campaign.tasks.operators", "campaign layers"),
        (f"{CAMPAIGN}/tasks/__init__.py", "import autoexp.campaign.alerts.notifier", "campaign layers"),
        (f"{CAMPAIGN}/alerts/__init__.py", "import autoexp.campaign.dags.factory", "campaign layers"),
        (f"{CAMPAIGN}/dags/__init__.py", "import autoexp.cli.main", "campaign layers"),
        # The UI plugin's app beside the DAGs: neither imports the other, planning imports neither.
        (f"{CAMPAIGN}/ui/pages.py", "import autoexp.campaign.dags.factory", "campaign layers"),
        (f"{CAMPAIGN}/planning/__init__.py", "import autoexp.campaign.ui.pages", "campaign layers"),
        (f"{CAMPAIGN}/ui/pages.py", "import autoexp.campaign.tasks.operators", "campaign ui imports none"),
        # Plugin layers: operators and sensors over triggers over policy over hooks over remote over model.
        (f"{PLUGIN}/model/states.py", "import slurm_operator.remote.commands", "plugin layers"),
        (f"{PLUGIN}/hooks/slurm.py", "import slurm_operator.policy.watchdog", "plugin layers"),
        (f"{PLUGIN}/sensors/remote_path.py", "import slurm_operator.operators.slurm", "plugin layers"),
        (f"{PLUGIN}/airflow_internals.py", "import slurm_operator.model.states", "plugin layers"),
        (f"{PLUGIN}/airflow_public.py", "import slurm_operator.model.states", "plugin layers"),
        (f"{PLUGIN}/airflow_internals.py", "import slurm_operator.airflow_public", "plugin layers"),
        (f"{PLUGIN}/airflow_version.py", "import slurm_operator.airflow_internals", "plugin layers"),
        (f"{PLUGIN}/remote/commands.py", "import airflow.sdk", "plugin model and remote import no Airflow"),
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
    # A contract with ignored imports ends "BROKEN (2 ignored imports)".
    broken = [line for line in out.stdout.splitlines() if re.search(r" BROKEN( \(.*\))?$", line)]
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


COMPAT = f"{PLUGIN}/airflow_internals.py"
# Airflow's public interface for what we build: the task SDK (its top level and its exceptions), the
# trigger base, the plugin manager and listener hooks, and the providers' own modules.
PUBLIC_AIRFLOW = ("airflow.sdk", "airflow.sdk.exceptions", "airflow.triggers.base", "airflow.plugins_manager",
                  "airflow.listeners")  # fmt: skip
# airflow_public may import 3.1's homes of the names airflow.sdk exports from 3.2 on (conf, the exceptions
# a task raises): public modules of 3.1's core, outside the interface the rest of the tree keeps to.
MOVED = f"{PLUGIN}/airflow_public.py"
MOVED_FROM = ("airflow.configuration", "airflow.exceptions")
VERSION = f"{PLUGIN}/airflow_version.py"  # reads airflow.__version__: `import airflow`, and nothing else


def private_airflow_imports(source: str, public: tuple[str, ...] = PUBLIC_AIRFLOW) -> list[str]:
    """``line: module`` of every import of an Airflow module outside its public interface (``public``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        private = [m for m in modules if m.split(".")[0] == "airflow" and m not in public]
        found += [f"{node.lineno}: {m}" for m in private if not m.startswith("airflow.providers.")]
    return found


def test_private_airflow_imports_are_the_compat_module_s_only() -> None:
    hits = [
        f"{path.relative_to(REPO)}:{hit}"
        for tree in ("src", "plugins", "dags")
        for path in sorted((REPO / tree).rglob("*.py"))
        if path.relative_to(REPO).as_posix() not in (COMPAT, VERSION)
        for hit in private_airflow_imports(
            path.read_text(), PUBLIC_AIRFLOW + MOVED_FROM if path == REPO / MOVED else PUBLIC_AIRFLOW
        )
    ]
    assert hits == []
    assert private_airflow_imports((REPO / COMPAT).read_text())  # where they are
    moved = [hit.split(": ")[1] for hit in private_airflow_imports((REPO / MOVED).read_text())]
    assert sorted(moved) == sorted(MOVED_FROM)  # what the moved names' module may import, it does
    version = (REPO / VERSION).read_text()
    assert [hit.split(": ")[1] for hit in private_airflow_imports(version)] == ["airflow"]
    assert "from airflow " not in version


def test_the_scan_sees_a_private_import_however_it_is_written() -> None:
    source = """
import airflow
import airflow.configuration as c
from airflow import settings
from airflow.models.pool import Pool
from airflow.sdk.definitions.param import ParamsDict
def f():
    from airflow.api_fastapi.core_api.security import get_user
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowException
from airflow.providers.ssh.hooks.ssh import SSHHook
from .airflow import x
"""
    assert private_airflow_imports(source) == [
        "2: airflow",
        "3: airflow.configuration",
        "4: airflow",
        "5: airflow.models.pool",
        "6: airflow.sdk.definitions.param",
        "8: airflow.api_fastapi.core_api.security",
    ]


def test_nothing_walks_stack_frames_or_writes_private_caches() -> None:
    """Both break silently when Airflow changes (docs/airflow-compat.md)."""
    hits = [
        f"{path.relative_to(REPO)}:{n}"
        for tree in ("src", "plugins")
        for path in sorted((REPO / tree).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"_getframe|_cached_template_context", line)
    ]
    assert hits == []
