"""The shipped cluster tools on the cluster: one content-addressed folder per hash, installed atomically.

``{TOOLS_ROOT}/{TOOLS_HASH}/`` holds include/'s autoexp_cluster, helpers and sbatch as this checkout has
them; every DAG of a campaign (and every campaign with the same TOOLS_ROOT) shares it. A folder is
complete when it exists: it is unpacked under a temporary name and renamed into place, so a concurrent
stager either wins the rename or removes its own copy, and a job never sees half a folder.
"""

from __future__ import annotations

import io
import shlex
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

COMPLETE = ".autoexp-tools-complete"  # written last inside the temporary folder, before the rename


def tool_dir(root: str, digest: str) -> str:
    return f"{root.rstrip('/')}/{digest}"


def targets(params: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """The distinct (TOOLS_ROOT, TOOLS_HASH) of the jobs that name a root, in first-seen order."""
    found: dict[tuple[str, str], None] = {}
    for p in params:
        root = str(p.get("TOOLS_ROOT") or "")
        if root:
            found[(root, str(p["TOOLS_HASH"]))] = None
    return list(found)


def archive(files: Sequence[tuple[str, Path]]) -> bytes:
    """A gzipped tar of ``files`` (name in the archive, local file), modes kept, owners and times not."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, path in files:
            info = tarfile.TarInfo(name)
            data = path.read_bytes()
            info.size, info.mode, info.mtime = len(data), 0o755 if path.stat().st_mode & 0o111 else 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def present(root: str, digest: str) -> str:
    """Print 1 when the tool folder is installed, else 0."""
    marker = shlex.quote(f"{tool_dir(root, digest)}/{COMPLETE}")
    return f"if [ -e {marker} ]; then echo 1; else echo 0; fi"


def install(root: str, digest: str, tarball: str, token: str) -> str:
    """Unpack ``tarball`` under a temporary name and rename it to the tool folder; print ``installed``
    when this call's copy won, ``present`` when another stager's did. Exits non-zero on failure."""
    final = tool_dir(root, digest)
    tmp = f"{root.rstrip('/')}/.tmp-{digest}-{token}"
    q_final, q_tmp, q_tar = shlex.quote(final), shlex.quote(tmp), shlex.quote(tarball)
    return (
        f"set -e; rm -rf {q_tmp}; mkdir -p {q_tmp}; tar -xzf {q_tar} -C {q_tmp}; rm -f {q_tar}; "
        f"touch {q_tmp}/{COMPLETE}; "
        f"if mv -T {q_tmp} {q_final} 2>/dev/null; then echo installed; "
        f"else rm -rf {q_tmp}; test -e {q_final}/{COMPLETE}; echo present; fi"
    )
