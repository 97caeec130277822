"""Expansion cache: what the factory needs of a config's jobs, stored per content hash (parse-time cost).

The DAG processor re-parses every DAG file every 30 s, and each parse expands the whole grid again
(about 0.6 s for the 1080 jobs of config/scaling_exps.yaml, more than the 0.5 s parse budget). The
planner only reads a few variables of most jobs, so a compact JSON copy of those, keyed by everything
the expansion depends on (file bytes, overrides, the environment variables the file reads, the
engine's code), lets a re-parse skip the expansion. Any doubt (unreadable, other version, odd
value) is a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoexp.campaign.planning.config_source import env_names
from autoexp.campaign.planning.settings import AirflowSettings, Keys

if TYPE_CHECKING:  # a cache hit never imports the config engine
    from autoexp.config.job import Job

log = logging.getLogger(__name__)
CACHE_ENV = "AUTOEXP_CACHE_DIR"  # a folder, or "off"
_FORMAT = 1
_SCALARS = (str, int, float, bool, type(None))
_PACKAGE = Path(__file__).resolve().parents[2]  # src/autoexp
_TOOLS = _PACKAGE.parents[1] / "include"  # autoexp.config.builtins.TOOLS_SOURCE
_KEEP = 32  # entries kept per folder: every edit of a config adds one


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
    for part in ("autoexp_cluster", "helpers", "sbatch"):  # autoexp.config.builtins.TOOLS_PARTS
        for source in sorted((_TOOLS / part).rglob("*")):
            if source.is_file() and "__pycache__" not in source.parts:
                st = source.stat()
                parts.append(f"{source.relative_to(_TOOLS)}:{st.st_size}:{st.st_mtime_ns}")
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
    return frozenset(getattr(keys, f.name) for f in fields(Keys))


def slim(jobs: Sequence[Job], settings: AirflowSettings) -> list[SlimJob]:
    """Jobs reduced to what the factory reads: every variable of pretraining's TRAIN job, the role
    variables of the others."""
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
        data = json.loads((folder / f"{key}.json").read_text(encoding="utf-8"))
        if data.get("format") != _FORMAT:
            return None
        return data["airflow"], [_decode(row) for row in data["jobs"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("ignoring unreadable expansion cache %s: %s", folder / f"{key}.json", exc)
        return None


def store(key: str, folder: Path | None, airflow: Any, jobs: Sequence[SlimJob]) -> None:
    """Write an entry atomically; values JSON would not give back unchanged are not cached."""
    if folder is None:
        return
    if any(not isinstance(v, _SCALARS) for job in jobs for v in job.params.values()):
        return
    try:
        text = json.dumps({"format": _FORMAT, "airflow": airflow, "jobs": [_encode(j) for j in jobs]})
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=folder, suffix=".tmp", delete=False, encoding="utf-8"
        ) as tmp:
            tmp.write(text)
        os.replace(tmp.name, folder / f"{key}.json")
        _prune(folder)
    except (OSError, TypeError, ValueError) as exc:  # a cache that cannot be written is only slower
        log.warning("cannot write the expansion cache in %s: %s", folder, exc)


def _prune(folder: Path) -> None:
    """Drop all but the newest entries (another process may prune at the same time: missing is fine)."""
    entries = []
    for entry in folder.glob("*.json"):
        try:
            entries.append((entry.stat().st_mtime, entry))
        except FileNotFoundError:
            continue
    for _, entry in sorted(entries, reverse=True)[_KEEP:]:
        entry.unlink(missing_ok=True)
