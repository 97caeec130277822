"""Stage ships the cluster-side tools to {TOOLS_ROOT}/{TOOLS_HASH} once per content hash, atomically, over
real SSH to the local cluster; the staged helpers and Python package work from there."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.hooks.slurm import SlurmHook

from autoexp.campaign.preflight import tool_stage
from autoexp.campaign.tasks import task_callables
from autoexp.config.builtins import tools_files, tools_hash
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = pytest.mark.slurm


class CountingHook(SlurmHook):
    """The real hook, counting its uploads (what the test asserts: one per content hash)."""

    uploads = 0

    def upload_file(self, local: str | Path, remote: str) -> None:
        type(self).uploads += 1
        super().upload_file(local, remote)


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_tools_are_staged_once_per_hash_and_identical(slurm_cluster: LocalCluster, tmp_path: Path) -> None:
    root, digest = str(tmp_path / "tools"), tools_hash()
    folder = Path(tool_stage.tool_dir(root, digest))
    CountingHook.uploads = 0
    with CountingHook(slurm_cluster.conn_id) as hook:
        assert task_callables.stage_tools(hook, [(root, digest)]) == [str(folder)]
        assert task_callables.stage_tools(hook, [(root, digest), (root, digest)]) == []
    assert CountingHook.uploads == 1
    shipped = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in tools_files()}
    staged = _tree(folder)
    assert staged.pop(tool_stage.COMPLETE) == hashlib.sha256(b"").hexdigest()
    assert staged == shipped
    assert sorted(p.name for p in Path(root).iterdir()) == [digest]  # no temporary left behind
    # The staged copy is what the jobs use: helpers run, the package imports with the interpreter.
    helper = folder / "helpers" / "convert_helper.sh"
    assert subprocess.run([helper, str(tmp_path / "no-run")], capture_output=True, text=True).stdout == "0\n"
    probe = [sys.executable, "-c", "import autoexp_cluster, sys; print(autoexp_cluster.__file__)"]
    out = subprocess.run(probe, env={"PYTHONPATH": str(folder)}, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(folder / "autoexp_cluster" / "__init__.py")

    # The folder deleted on the "cluster" side: the next stage puts it back, again one upload.
    subprocess.run(["rm", "-rf", str(folder)], check=True)
    with CountingHook(slurm_cluster.conn_id) as hook:
        assert task_callables.stage_tools(hook, [(root, digest)]) == [str(folder)]
    assert CountingHook.uploads == 2
    assert _tree(folder) == {**shipped, tool_stage.COMPLETE: hashlib.sha256(b"").hexdigest()}


def test_concurrent_stagers_leave_one_complete_folder(slurm_cluster: LocalCluster, tmp_path: Path) -> None:
    root, digest = str(tmp_path / "tools"), tools_hash()

    def stage(_: Any) -> list[str]:
        with SlurmHook(slurm_cluster.conn_id) as hook:
            return task_callables.stage_tools(hook, [(root, digest)])

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(stage, range(4)))
    # Each stager that found no folder uploaded its own copy; exactly one rename won, the rest removed theirs.
    assert sum(len(r) for r in results) == 1
    assert sorted(p.name for p in Path(root).iterdir()) == [digest]
    assert (Path(root) / digest / tool_stage.COMPLETE).exists()
    assert len(_tree(Path(root) / digest)) == len(tools_files()) + 1
