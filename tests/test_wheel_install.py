"""A wheel install (no checkout beside it) finds the cluster tools inside the package, under the checkout's
TOOLS_HASH: the same files, so the same staged folder on the cluster."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from autoexp.config.builtins import tools_files, tools_hash

REPO = Path(__file__).resolve().parents[1]
# What the build reads; a copy, so the build's build/ and *.egg-info never land in the checkout.
SOURCES = ("pyproject.toml", "README.md", "src", "plugins", "include")
PROBE = """
import json, autoexp
from autoexp.campaign.configs import cache
from autoexp.config.builtins import TOOLS_SOURCE, tools_files, tools_hash
print(json.dumps({
    "package": autoexp.__file__, "source": str(TOOLS_SOURCE), "hash": tools_hash(),
    "files": [name for name, _ in tools_files()], "fingerprint": cache._code_fingerprint(),
}))
"""


def _install_wheel(tmp_path: Path) -> Path:
    """Build the checkout's wheel offline and install it alone into a fresh venv; its python."""
    tree, dist, venv = tmp_path / "tree", tmp_path / "dist", tmp_path / "venv"
    tree.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
            shutil.copytree(REPO / name, tree / name, ignore=skip)
        else:
            shutil.copy2(REPO / name, tree / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", dist, tree]
    subprocess.run([*pip, *build], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    (wheel,) = dist.glob("autoexp-*.whl")
    subprocess.run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel], check=True)
    # autoexp's dependencies (pyyaml, omegaconf, pydantic) from this venv, appended after the wheel's
    # site-packages: a plain path, so the editable install's .pth finder there is never run.
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_a_wheel_install_finds_the_tools_in_the_package_under_the_checkouts_hash(tmp_path: Path) -> None:
    python = _install_wheel(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run(
        [python, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    )
    found = json.loads(probe.stdout)
    package = Path(found["package"]).parent
    assert package.is_relative_to(tmp_path / "venv"), found["package"]
    assert Path(found["source"]) == package / "include"
    checkout = REPO / "include"
    assert found["files"] == [name for name, _ in tools_files(checkout)]
    assert found["hash"] == tools_hash(checkout)
    assert "sbatch/train_container_simple.sh:" in found["fingerprint"]  # the cache watches the same files
