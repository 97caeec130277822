"""Cancels of our own (a marker first), who cancelled from outside.

The command strings exactly, then each script run by a real ``sh`` (only ``scancel`` is a fake: a
real cancel needs a cluster; the real one is in integration/test_faults_real.py).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from slurm_operator.model import naming
from slurm_operator.remote import commands, parsers


def test_marked_scancel_is_one_sh_command_with_the_values_as_arguments() -> None:
    cmd = commands.cancel("12", marker="/r/a b-12.out.airflow-cancel", reason="hung: it's quiet")
    argv = shlex.split(cmd)
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["sh", "12", "/r/a b-12.out.airflow-cancel", "hung: it's quiet"]
    assert argv[2] == (
        '{ printf \'%s\\n\' "$3" > "$2.tmp.$$" && mv -f "$2.tmp.$$" "$2"; } 2>/dev/null ||\n'
        '  echo "could not write the cancel marker $2" >&2\n'
        'scancel "$1" || { rc=$?; rm -f "$2"; exit $rc; }'
    )
    assert commands.cancel("12") == "scancel 12"
    assert commands.cancel("12", "USR1") == "scancel --signal=USR1 12"
    with pytest.raises(ValueError, match="a marked cancel ends the job: it sends no signal"):
        commands.cancel("12", "USR1", marker="/m")
    with pytest.raises(ValueError, match="not a Slurm job id"):
        commands.cancel("12; reboot", marker="/m")


def _fake_scancel(tmp_path: Path, rc: int) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "scancel"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scancel.calls\nexit {rc}\n')
    fake.chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def _cancel(marker: Path, reason: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The marked cancel of job 12, run by a real sh."""
    cmd = commands.cancel("12", marker=str(marker), reason=reason)
    return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, env=env)


def test_the_marker_is_written_before_scancel_runs(tmp_path: Path) -> None:
    marker = tmp_path / "job-12.out.airflow-cancel"
    env = _fake_scancel(tmp_path, 0)
    # The fake scancel sees the marker already there: no cancel of ours is ever seen without it.
    (tmp_path / "bin" / "scancel").write_text(
        f"#!/bin/sh\ncat {shlex.quote(str(marker))} > {tmp_path}/seen-by-scancel\n"
        f'echo "$@" >> {tmp_path}/scancel.calls\n'
    )
    proc = _cancel(marker, "on_kill: marked failed $(x)", env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "seen-by-scancel").read_text() == "on_kill: marked failed $(x)\n"
    assert marker.read_text() == "on_kill: marked failed $(x)\n"
    assert (tmp_path / "scancel.calls").read_text() == "12\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bin",
        "job-12.out.airflow-cancel",
        "scancel.calls",
        "seen-by-scancel",
    ]  # no temporary file left


def test_a_refused_scancel_removes_the_marker_and_keeps_its_exit_status(tmp_path: Path) -> None:
    marker = tmp_path / "job-12.out.airflow-cancel"
    proc = _cancel(marker, "hung", _fake_scancel(tmp_path, 1))
    assert proc.returncode == 1
    assert not marker.exists()  # we did not cancel it: no marker may say we did


def test_an_unwritable_marker_does_not_stop_the_cancel(tmp_path: Path) -> None:
    marker = tmp_path / "no such dir" / "job-12.out.airflow-cancel"
    proc = _cancel(marker, "hung", _fake_scancel(tmp_path, 0))
    assert proc.returncode == 0
    assert (tmp_path / "scancel.calls").read_text() == "12\n"
    assert proc.stderr == f"could not write the cancel marker {marker}\n"


def test_user_name_and_the_parsers_of_who_cancelled() -> None:
    assert commands.user_name(1000) == "getent passwd 1000"
    assert parsers.cancelled_by_uid("CANCELLED by 1000") == 1000
    assert parsers.cancelled_by_uid("CANCELLED by 0 ") == 0
    assert parsers.cancelled_by_uid("CANCELLED") is None
    assert parsers.cancelled_by_uid("CANCELLED+") is None
    assert parsers.cancelled_by_uid("FAILED") is None
    assert parsers.parse_passwd_name("alice:x:1000:1000:Alice:/home/alice:/bin/bash\n") == "alice"
    assert parsers.parse_passwd_name("") is None
    assert parsers.parse_passwd_name(":x:1:1::/:/bin/sh") is None


def test_naming_of_copies_and_markers() -> None:
    assert naming.attempt_script_base("/r/", "n") == "/r/scripts/n"
    assert naming.attempt_script_path("/r", "n", 7) == "/r/scripts/n.attempt007.sbatch"
    assert naming.cancel_marker_path("/r/n-12.out") == "/r/n-12.out.airflow-cancel"
