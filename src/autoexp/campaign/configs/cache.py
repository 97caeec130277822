"""Expansion cache: what the factory needs of a config's jobs, stored per content hash (parse-time cost).

The DAG processor re-parses every DAG file every 30 s, and each parse expands the whole grid again
(about 0.6 s for the 1080 jobs of config/scaling_exps.yaml, more than the 0.5 s parse budget). The
planner only reads a few variables of most jobs, so a compact JSON copy of those, keyed by everything
the expansion depends on (file bytes, overrides, the environment variables the file reads, the
engine's code), lets a re-parse skip the expansion. Any doubt (unreadable, other version, odd
value) is a miss. Entries are zlib-compressed JSON: a grid repeats its run folders in every job's
paths and commands (the 900-experiment grid: 19 MB of JSON, 0.4 MB compressed, 20 ms to inflate).
Beside the entries, ``<hash of the config's path>.ids`` lists a config's DAG ids and experiments: the
other DAG files read it to refuse a DAG id that two configs build, without planning it themselves.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoexp.campaign.configs.config_source import env_names
from autoexp.campaign.planning import divergence
from autoexp.campaign.planning.settings import AirflowSettings, Keys
from autoexp.cluster_tools import TOOLS_PARTS, TOOLS_SOURCE

if TYPE_CHECKING:  # a cache hit never imports the config engine
    from autoexp.config.job import Job

log = logging.getLogger(__name__)
CACHE_ENV = "AUTOEXP_CACHE_DIR"  # a folder, or "off"
_FORMAT = 2  # 2: zlib-compressed
_SUFFIX = ".json.z"
_SCALARS = (str, int, float, bool, type(None))
_PACKAGE = Path(__file__).resolve().parents[2]  # the autoexp package
_KEEP = 32  # entries (and id lists) kept per folder: every edit of a config adds an entry


@dataclass(frozen=True)
class SlimJob:
    """The planner's view of a config-engine Job: the special fields and the variables it reads."""

    name: str
    params: Mapping[str, Any]
    template: Path | None
    output_file: str
    check_interval_secs: int | float
    start_condition_cmd: str
    termination_str: str
    termination_cmd: str

    def origin(self, var: str) -> str:
        # Only configs that planned cleanly are cached, so no error message needs a line number.
        raise KeyError(var)


def cache_dir(env: Mapping[str, str] | None = None) -> Path | None:
    """$AUTOEXP_CACHE_DIR, else $AIRFLOW_HOME/autoexp-cache, else ~/.cache/autoexp; None when "off"."""
    env = os.environ if env is None else env
    chosen = env.get(CACHE_ENV, "")
    if chosen.lower() == "off":
        return None
    if chosen:
        return Path(chosen)
    if env.get("AIRFLOW_HOME"):
        return Path(env["AIRFLOW_HOME"]) / "autoexp-cache"
    return Path.home() / ".cache" / "autoexp"


def _code_fingerprint() -> str:
    """Size and mtime of the engine and planner sources, and of the shipped cluster tools (their hash is
    the built-in TOOLS_HASH of every job): editing any of them invalidates every entry."""
    parts = []
    for folder in (_PACKAGE / "config", _PACKAGE / "campaign" / "planning"):
        for source in sorted(folder.glob("*.py")):
            st = source.stat()
            parts.append(f"{source.name}:{st.st_size}:{st.st_mtime_ns}")
    for part in TOOLS_PARTS:
        for source in sorted((TOOLS_SOURCE / part).rglob("*")):
            if source.is_file() and "__pycache__" not in source.parts:
                st = source.stat()
                parts.append(f"{source.relative_to(TOOLS_SOURCE)}:{st.st_size}:{st.st_mtime_ns}")
    return ";".join(parts)


def cache_key(text: bytes, overrides: Sequence[str], location: Path) -> str:
    """Hash of everything an expansion depends on, the config's folder included (relative template
    paths resolve against it, so the same text elsewhere is another expansion)."""
    digest = hashlib.sha256()
    digest.update(f"format {_FORMAT}\n{_code_fingerprint()}\n{location.resolve()}\n".encode())
    digest.update(json.dumps(list(overrides)).encode())
    for name in env_names(text):
        digest.update(f"\n{name}={os.environ.get(name)!r}".encode())
    digest.update(b"\n")
    digest.update(text)
    return digest.hexdigest()[:32]


def _variables(keys: Keys) -> frozenset[str]:
    return frozenset(getattr(keys, f.name) for f in fields(Keys)) | frozenset(divergence.READS)


def slim(jobs: Sequence[Job], settings: AirflowSettings) -> list[SlimJob]:
    """Jobs reduced to what the factory reads: every variable of pretraining's TRAIN job, the role
    variables and those of the divergence rules of the others."""
    keys = settings.keys
    wanted = _variables(keys)
    out = []
    for job in jobs:
        full = job.params.get(keys.phase) == keys.pretrain and job.params.get(keys.mode) == keys.train
        params = dict(job.params) if full else {k: v for k, v in job.params.items() if k in wanted}
        out.append(
            SlimJob(
                name=job.name,
                params=params,
                template=job.template,
                output_file=job.output_file,
                check_interval_secs=job.check_interval_secs,
                start_condition_cmd=job.start_condition_cmd,
                termination_str=job.termination_str,
                termination_cmd=job.termination_cmd,
            )
        )
    return out


def _encode(job: SlimJob) -> list[Any]:
    return [
        job.name,
        job.params,
        None if job.template is None else str(job.template),
        job.output_file,
        job.check_interval_secs,
        job.start_condition_cmd,
        job.termination_str,
        job.termination_cmd,
    ]


def _decode(row: list[Any]) -> SlimJob:
    name, params, template, output_file, interval, start, term_str, term_cmd = row
    return SlimJob(
        name=name,
        params=params,
        template=None if template is None else Path(template),
        output_file=output_file,
        check_interval_secs=interval,
        start_condition_cmd=start,
        termination_str=term_str,
        termination_cmd=term_cmd,
    )


def load(key: str, folder: Path | None) -> tuple[Any, list[SlimJob]] | None:
    """(raw airflow section, slim jobs) stored under ``key``, or None."""
    if folder is None:
        return None
    try:
        data = json.loads(zlib.decompress((folder / f"{key}{_SUFFIX}").read_bytes()))
        if data.get("format") != _FORMAT:
            return None
        return data["airflow"], [_decode(row) for row in data["jobs"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, zlib.error) as exc:
        log.warning("ignoring unreadable expansion cache %s: %s", folder / f"{key}{_SUFFIX}", exc)
        return None


def store(key: str, folder: Path | None, airflow: Any, jobs: Sequence[SlimJob]) -> None:
    """Write an entry atomically; values JSON would not give back unchanged are not cached."""
    if folder is None:
        return
    if any(not isinstance(v, _SCALARS) for job in jobs for v in job.params.values()):
        return
    try:
        text = json.dumps({"format": _FORMAT, "airflow": airflow, "jobs": [_encode(j) for j in jobs]})
        _write(folder, f"{key}{_SUFFIX}", zlib.compress(text.encode(), 6))
        _prune(folder)
    except (OSError, TypeError, ValueError) as exc:  # a cache that cannot be written is only slower
        log.warning("cannot write the expansion cache in %s: %s", folder, exc)


def _write(folder: Path, name: str, data: bytes) -> None:
    """Atomically: a parse in another process never reads half a file."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=folder, suffix=".tmp", delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, folder / name)


def _ids_file(config: Path, folder: Path) -> Path:
    return folder / (hashlib.sha256(str(config.absolute()).encode()).hexdigest()[:32] + ".ids")


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns]


def load_ids(config: Path, folder: Path | None) -> dict[str, str] | None:
    """{DAG id: experiment} of ``config`` as last planned, or None (not planned since it changed,
    unreadable). Found by the config's path and checked by its size and mtime, never by reading it:
    a config on a hung file system must not hang the DAG files that only ask for its ids."""
    if folder is None:
        return None
    try:
        stamp = _stamp(config.stat())
        data = json.loads(_ids_file(config, folder).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("ignoring unreadable DAG id list of %s: %s", config, exc)
        return None
    ids = data.get("ids") if isinstance(data, dict) and data.get("stamp") == stamp else None
    if not isinstance(ids, dict) or not all(isinstance(v, str) for v in ids.values()):
        return None
    return ids


def store_ids(config: Path, st: os.stat_result, folder: Path | None, ids: Mapping[str, str]) -> None:
    """Record the DAG ids planned from ``config`` as it was at ``st`` (written when they changed)."""
    if folder is None:
        return
    text = json.dumps({"stamp": _stamp(st), "ids": dict(ids)}).encode()
    target = _ids_file(config, folder)
    try:
        if target.exists() and target.read_bytes() == text:
            return
        _write(folder, target.name, text)
    except (OSError, TypeError, ValueError) as exc:
        log.warning("cannot write the DAG id list in %s: %s", folder, exc)


def _prune(folder: Path) -> None:
    """Keep the newest files (entries, id lists; format-1 ``*.json`` entries age out too);
    another process may prune at the same time: missing is fine."""
    newest: dict[str, float] = {}
    files: list[tuple[str, Path]] = []
    for entry in [*folder.glob(f"*{_SUFFIX}"), *folder.glob("*.ids"), *folder.glob("*.json")]:
        try:
            mtime = entry.stat().st_mtime
        except FileNotFoundError:
            continue
        key = entry.name.split(".", 1)[0]
        newest[key] = max(mtime, newest.get(key, mtime))
        files.append((key, entry))
    kept = set(sorted(newest, key=newest.__getitem__, reverse=True)[:_KEEP])
    for key, entry in files:
        if key not in kept:
            entry.unlink(missing_ok=True)
