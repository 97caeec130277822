"""Submitting an attempt: the one remote command (lock, adopt, script copy, sbatch), its output, the attempt.

Each script is run by a real ``sh`` with fake ``squeue`` and ``sbatch`` (what they print is set per
test: a real cluster cannot be made to list a given set of states); the real ones over SSH are in
test_hooks.py and integration/test_faults_real.py.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.model.exceptions import (
    SlurmCommandError,
    SlurmParseError,
    SlurmSubmitError,
    SlurmSubmitLimitError,
)
from slurm_operator.operators.submission import SubmitFailed, SubmitSpec, submit_attempt
from slurm_operator.remote import commands, parsers
from slurm_operator.remote.commands import AttemptSubmit
from slurm_operator.remote.parsers import Submitted

NAME = "exp-pretrain-train-0123456789"


def test_the_submit_is_one_sh_command_with_every_value_an_argument() -> None:
    spec = AttemptSubmit(
        "/r/scripts/n x",
        3,
        sbatch_args=["--job-name=x y"],
        environment={"A": "1 2"},
        source="/r/s.sbatch",
        log_dir="/r/logs",
        lock_path="/r/locks/submit.lock",
        name=NAME,
    )
    argv = shlex.split(commands.submit_attempt(spec))
    assert argv[:2] == ["sh", "-c"]
    active = argv[6].split(",")
    assert argv[3:] == [
        "sh",
        "/r/locks/submit.lock",
        "120",
        argv[6],
        NAME,
        "/r/scripts/n x",
        "3",
        "1003",
        "/r/logs",
        "/r/s.sbatch",
        "env",
        "--",
        "A=1 2",
        "sbatch",
        "--parsable",
        "--job-name=x y",
    ]
    assert {"PENDING", "RUNNING", "SUSPENDED"} <= set(active)
    assert not {"COMPLETED", "COMPLETING", "CANCELLED"} & set(active)  # ended, or ending
    assert '(set -C; : > "$f")' in argv[2]  # noclobber: an exclusive create
    unlocked = shlex.split(commands.submit_attempt(AttemptSubmit("/r/scripts/n", 1)))
    assert unlocked[4:13] == ["", "120", argv[6], "", "/r/scripts/n", "1", "1001", "", ""]
    with pytest.raises(ValueError, match="not a usable Slurm job name"):
        commands.submit_attempt(AttemptSubmit("/r/n", 1, lock_path="/r/l", name="a b"))
    with pytest.raises(ValueError, match="not a usable remote path"):
        commands.submit_attempt(AttemptSubmit("/r/n", 1, lock_path="", name=NAME))
    with pytest.raises(ValueError, match="attempt numbers start at 1, got 0"):
        commands.submit_attempt(AttemptSubmit("/r/n", 0))


def test_the_output_tells_an_adopted_job_from_a_new_one_and_names_the_copy_of_a_refusal() -> None:
    adopt = f"{commands.ADOPT_MARK} 17 9\n"
    assert parsers.submitted_attempt("cmd", 0, adopt, "") == Submitted(None, "17", adopted=True)
    copy = f"{commands.COPY_MARK} 4\n"
    assert parsers.submitted_attempt("cmd", 0, copy + "42;c1\n", "") == Submitted(4, "42")
    with pytest.raises(SlurmParseError, match="job ids after the adopt mark"):
        parsers.submitted_attempt("cmd", 0, f"{commands.ADOPT_MARK}\n", "")
    with pytest.raises(SlurmParseError, match="the claimed script copy's number"):
        parsers.submitted_attempt("cmd", 0, "42\n", "")
    with pytest.raises(SlurmSubmitError, match=r"refused: Invalid account \(script copy 4\)"):
        parsers.submitted_attempt("cmd", 1, copy, "sbatch: error: Invalid account\n")
    with pytest.raises(SlurmSubmitLimitError, match=r"submit limit .*\(script copy 4\)"):
        parsers.submitted_attempt("cmd", 1, copy, "sbatch: error: QOSMaxSubmitJobPerUserLimit\n")
    with pytest.raises(SlurmCommandError, match="no script copy submitted: lock /l not acquired") as err:
        parsers.submitted_attempt("cmd", 1, "", "lock /l not acquired within 1 s\n")
    assert not isinstance(err.value, SlurmSubmitError)  # nothing reached sbatch


def _fake_slurm(tmp_path: Path, squeue_out: str = "", sbatch_rc: int = 0) -> dict[str, str]:
    """squeue prints ``squeue_out``; sbatch records its argv and its script's text, prints a job id."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "squeue").write_text(f"#!/bin/sh\nprintf '%s' '{squeue_out}'\n")
    calls = tmp_path / "sbatch.calls"
    refuse = 'echo "sbatch: error: Invalid account" >&2; exit 1' if sbatch_rc else "echo 77"
    (bin_dir / "sbatch").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\neval "last=\\${{$#}}"; cat "$last" >> {calls}\n{refuse}\n'
    )
    for tool in ("squeue", "sbatch"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def _submit(
    tmp_path: Path, spec: AttemptSubmit, env: dict[str, str], stdin: str | None = "#!/bin/sh\necho hi\n"
) -> subprocess.CompletedProcess[str]:
    command = commands.submit_attempt(spec)
    return subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True, env=env)


def _read(proc: subprocess.CompletedProcess[str]) -> Submitted:
    return parsers.submitted_attempt("cmd", proc.returncode, proc.stdout, proc.stderr)


def _locked(tmp_path: Path, **kw: Any) -> AttemptSubmit:
    lock = tmp_path / "run dir" / "locks" / "submit.lock"
    return AttemptSubmit(str(tmp_path / "run dir" / "scripts" / "n"), 1, lock_path=str(lock), name=NAME, **kw)


def test_the_real_shell_adopts_an_active_job_and_claims_and_submits_nothing(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path, "12 COMPLETED\n15 RUNNING\n16 PENDING\n")
    assert _read(_submit(tmp_path, _locked(tmp_path), env)) == Submitted(None, "16", adopted=True)
    assert (tmp_path / "run dir" / "locks" / "submit.lock").exists()  # its folder was created
    assert not (tmp_path / "sbatch.calls").exists()
    assert not (tmp_path / "run dir" / "scripts").exists()  # no unused copy


def test_the_real_shell_submits_a_copy_when_only_ended_jobs_have_the_name(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path, "12 COMPLETED\n13 COMPLETING\n")
    log_dir = tmp_path / "logs" / "deep"
    assert _read(_submit(tmp_path, _locked(tmp_path, log_dir=str(log_dir)), env)) == Submitted(1, "77")
    copy = tmp_path / "run dir" / "scripts" / "n.attempt001.sbatch"
    assert (tmp_path / "sbatch.calls").read_text() == f"--parsable {copy}\n#!/bin/sh\necho hi\n"
    assert log_dir.is_dir()  # Slurm would not create it: the job would end FAILED with no log


def test_a_copy_is_filled_from_a_cluster_file_and_a_missing_one_leaves_no_copy(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path)
    source = tmp_path / "rendered job.sbatch"
    source.write_text("#!/bin/sh\necho rendered\n")
    spec = AttemptSubmit(str(tmp_path / "scripts" / "n"), 2, source=str(source), sbatch_args=["--time=1"])
    assert _read(_submit(tmp_path, spec, env, stdin=None)) == Submitted(2, "77")
    assert (tmp_path / "scripts" / "n.attempt002.sbatch").read_text() == "#!/bin/sh\necho rendered\n"
    source.unlink()
    proc = _submit(tmp_path, AttemptSubmit(str(tmp_path / "scripts" / "n"), 3, source=str(source)), env, None)
    with pytest.raises(SlurmCommandError, match=r"no script copy submitted: cat: .*rendered job\.sbatch"):
        _read(proc)
    assert sorted(p.name for p in (tmp_path / "scripts").iterdir()) == ["n.attempt002.sbatch"]


def test_a_refused_sbatch_names_its_copy_and_the_copy_stays(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path, sbatch_rc=1)
    proc = _submit(tmp_path, AttemptSubmit(str(tmp_path / "scripts" / "n"), 1), env)
    with pytest.raises(SlurmSubmitError, match=r"Invalid account \(script copy 1\)"):
        _read(proc)
    assert (tmp_path / "scripts" / "n.attempt001.sbatch").exists()  # provenance of what was refused


def test_the_real_shell_waits_for_the_lock_and_then_fails_with_its_reason(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path)
    lock = tmp_path / "submit.lock"
    lock.touch()
    spec = AttemptSubmit(str(tmp_path / "n"), 1, lock_path=str(lock), name=NAME, wait_secs=1)
    with subprocess.Popen(["flock", str(lock), "sleep", "5"]) as holder:
        try:
            subprocess.run(["sh", "-c", f"until ! flock -n {lock} true; do :; done"], check=True, timeout=5)
            proc = _submit(tmp_path, spec, env)
        finally:
            holder.kill()
    assert proc.returncode == 1
    assert f"lock {lock} not acquired within 1 s" in proc.stderr
    assert not (tmp_path / "sbatch.calls").exists()


def test_a_claim_takes_the_first_free_number_and_never_overwrites(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path)
    base = tmp_path / "run dir" / "scripts" / "n"
    assert _read(_submit(tmp_path, AttemptSubmit(str(base), 1), env, "one\n")).number == 1
    # The history was lost: the next claim starts at 1 again and still takes a free name.
    Path(f"{base}.attempt002.sbatch").write_text("kept\n")
    assert _read(_submit(tmp_path, AttemptSubmit(str(base), 1), env, "three\n")).number == 3
    texts = [Path(f"{base}.attempt{n:03d}.sbatch").read_text() for n in (1, 2, 3)]
    assert texts == ["one\n", "kept\n", "three\n"]
    full = _submit(tmp_path, AttemptSubmit(str(base), 1, tries=3), env, "x")
    assert (full.returncode, full.stderr) == (1, f"no free script copy name from 1 to 4 for {base}\n")


def test_concurrent_claims_get_distinct_numbers(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path)
    base = tmp_path / "scripts" / "n"
    results: list[int | None] = []

    def claim(i: int) -> None:
        results.append(_read(_submit(tmp_path, AttemptSubmit(str(base), 1), env, f"copy {i}\n")).number)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(n or 0 for n in results) == list(range(1, 9))
    texts = sorted(Path(f"{base}.attempt{n:03d}.sbatch").read_text() for n in range(1, 9))
    assert texts == sorted(f"copy {i}\n" for i in range(8))  # each copy whole, none written twice


def test_a_claim_that_cannot_create_its_folder_fails(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    spec = AttemptSubmit(str(tmp_path / "file" / "scripts" / "n"), 1)
    proc = _submit(tmp_path, spec, _fake_slurm(tmp_path))
    assert proc.returncode == 1
    assert "Not a directory" in proc.stderr


class SubmittingHook:
    """The one hook call submit_attempt makes, answering ``answer`` (or raising it)."""

    def __init__(self, answer: Submitted | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[AttemptSubmit, str | None]] = []

    def submit_attempt(self, spec: AttemptSubmit, script: str | None = None) -> Submitted:
        self.calls.append((spec, script))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _spec(script: str | None = None, output: str = f"/r/{NAME}-%j.out") -> SubmitSpec:
    path = None if script is not None else "/r/s.sbatch"
    return SubmitSpec("/r", NAME, output, script, path, ["--time=1"], {"A": "1"}, "/r/l")


def test_an_attempt_submitted_under_the_lock_is_a_new_job() -> None:
    hook = SubmittingHook(Submitted(2, "300"))
    attempt = submit_attempt(hook, _spec(), 2, 1, logging.getLogger(__name__))  # type: ignore[arg-type]
    assert hook.calls == [
        (
            AttemptSubmit(
                f"/r/scripts/{NAME}",
                2,
                sbatch_args=["--time=1", f"--job-name={NAME}", f"--output=/r/{NAME}-%j.out"],
                environment={"A": "1"},
                source="/r/s.sbatch",
                log_dir=None,  # /r: the claim creates /r/scripts, and /r with it
                lock_path="/r/l",
                name=NAME,
            ),
            None,
        )
    ]
    assert (attempt.job_id, attempt.reattached, attempt.script_path) == (
        "300",
        False,
        f"/r/scripts/{NAME}.attempt002.sbatch",
    )


def test_a_script_text_goes_on_stdin_and_an_outside_log_folder_is_created() -> None:
    hook = SubmittingHook(Submitted(5, "301"))
    attempt = submit_attempt(hook, _spec("#!/bin/sh\n", "/logs/%j.out"), 5, 1, logging.getLogger(__name__))  # type: ignore[arg-type]
    ((spec, script),) = hook.calls
    assert (spec.source, spec.log_dir, script) == (None, "/logs", "#!/bin/sh\n")
    assert (attempt.attempt, attempt.log_path) == (5, "/logs/301.out")


def test_an_adopted_job_becomes_a_reattached_attempt_with_its_own_log() -> None:
    hook = SubmittingHook(Submitted(None, "250", adopted=True))
    attempt = submit_attempt(hook, _spec(), 1, 3, logging.getLogger(__name__))  # type: ignore[arg-type]
    assert (attempt.attempt, attempt.job_id, attempt.log_path, attempt.script_path) == (
        1,
        "250",
        f"/r/{NAME}-250.out",
        "",
    )
    assert (attempt.reattached, attempt.try_number) == (True, 3)


def test_a_failed_submit_names_the_copies_it_was_claiming() -> None:
    hook = SubmittingHook(SlurmSubmitError("sbatch refused: Invalid account (script copy 1)"))
    with pytest.raises(SubmitFailed) as err:
        submit_attempt(hook, _spec(), 1, 1, logging.getLogger(__name__))  # type: ignore[arg-type]
    assert str(err.value) == (
        f"submitting /r/scripts/{NAME}.attempt*.sbatch failed: "
        "sbatch refused: Invalid account (script copy 1)"
    )
