"""Cancels of our own (a marker first), who cancelled from outside, script copies never overwritten.

The command strings exactly, then each script run by a real ``sh`` (only ``scancel`` is a fake: a
real cancel needs a cluster; the real one is in integration/test_faults_real.py).
"""

from __future__ import annotations

import shlex
import subprocess
import threading
from pathlib import Path

import pytest
from slurm_operator import commands, naming, parsers
from slurm_operator.exceptions import SlurmParseError


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


def test_claim_script_copy_command() -> None:
    argv = shlex.split(commands.claim_script_copy("/r/scripts/n", 3))
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["sh", "/r/scripts/n", "3", "1003"]
    assert '(set -C; : > "$f")' in argv[2]  # noclobber: an exclusive create
    with pytest.raises(ValueError, match="attempt numbers start at 1, got 0"):
        commands.claim_script_copy("/r/scripts/n", 0)
    with pytest.raises(ValueError, match="not a usable remote path"):
        commands.claim_script_copy("", 1)


def _claim(base: Path, first: int, text: str, tries: int = 1000) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", commands.claim_script_copy(str(base), first, tries)],
        input=text,
        capture_output=True,
        text=True,
    )


def test_a_claim_takes_the_first_free_number_and_never_overwrites(tmp_path: Path) -> None:
    base = tmp_path / "run dir" / "scripts" / "n"
    first = _claim(base, 1, "#!/bin/bash\necho one\n")
    assert (first.returncode, first.stdout) == (0, "1\n")
    assert Path(f"{base}.attempt001.sbatch").read_text() == "#!/bin/bash\necho one\n"
    # The history was lost: the next claim starts at 1 again and still takes a free name.
    Path(f"{base}.attempt002.sbatch").write_text("kept\n")
    again = _claim(base, 1, "#!/bin/bash\necho three\n")
    assert again.stdout == "3\n"
    assert Path(f"{base}.attempt001.sbatch").read_text() == "#!/bin/bash\necho one\n"
    assert Path(f"{base}.attempt002.sbatch").read_text() == "kept\n"
    assert Path(f"{base}.attempt003.sbatch").read_text() == "#!/bin/bash\necho three\n"
    assert parsers.parse_number(again.stdout, "claim") == 3
    full = _claim(base, 1, "x", tries=3)
    assert full.returncode == 1
    assert full.stderr == f"no free script copy name from 1 to 4 for {base}\n"


def test_concurrent_claims_get_distinct_numbers(tmp_path: Path) -> None:
    base = tmp_path / "scripts" / "n"
    results: list[str] = []

    def claim(i: int) -> None:
        results.append(_claim(base, 1, f"copy {i}\n").stdout.strip())

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results, key=int) == [str(n) for n in range(1, 9)]
    texts = sorted(Path(f"{base}.attempt{n:03d}.sbatch").read_text() for n in range(1, 9))
    assert texts == sorted(f"copy {i}\n" for i in range(8))  # each copy whole, none written twice


def test_a_claim_that_cannot_create_its_folder_fails(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    proc = _claim(tmp_path / "file" / "scripts" / "n", 1, "x")
    assert proc.returncode == 1
    assert "Not a directory" in proc.stderr


def test_parse_number_quotes_what_it_cannot_read() -> None:
    with pytest.raises(SlurmParseError, match=r"expected a number from 'claim': 'oops\\n'"):
        parsers.parse_number("oops\n", "claim")
