"""Submitting once per job name: the locked check-and-sbatch command, its output, the attempt it gives."""

from __future__ import annotations

import logging
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from slurm_operator import commands, parsers
from slurm_operator.exceptions import SlurmParseError, SlurmSubmitError
from slurm_operator.submission import SubmitSpec, submit_attempt

NAME = "exp-pretrain-train-0123456789"


def test_submit_once_is_one_sh_command_with_every_value_an_argument() -> None:
    sbatch = commands.sbatch(script_path="/r/s.sbatch", sbatch_args=["--job-name=x y"])
    argv = shlex.split(commands.submit_once("/r/locks/submit.lock", NAME, sbatch))
    assert argv[:2] == ["sh", "-c"]
    active = argv[6].split(",")
    assert argv[4:] == [
        "/r/locks/submit.lock",
        "120",
        argv[6],
        NAME,
        "sbatch",
        "--parsable",
        "--job-name=x y",
        "/r/s.sbatch",
    ]
    assert {"PENDING", "RUNNING", "SUSPENDED"} <= set(active)
    assert not {"COMPLETED", "COMPLETING", "CANCELLED"} & set(active)  # ended, or ending
    with pytest.raises(ValueError, match="not a usable Slurm job name"):
        commands.submit_once("/r/l", "a b", sbatch)
    with pytest.raises(ValueError, match="not a usable remote path"):
        commands.submit_once("", NAME, sbatch)


def test_submitted_once_tells_an_adopted_job_from_a_new_one() -> None:
    adopt = f"{commands.ADOPT_MARK} 17 9\n"
    assert parsers.submitted_once("cmd", 0, adopt, "") == ("17", True)
    assert parsers.submitted_once("cmd", 0, "42\n", "") == ("42", False)
    with pytest.raises(SlurmParseError, match="job ids after the adopt mark"):
        parsers.submitted_once("cmd", 0, f"{commands.ADOPT_MARK}\n", "")
    with pytest.raises(SlurmSubmitError, match="Invalid account"):
        parsers.submitted_once("cmd", 1, "", "sbatch: error: Invalid account")


def _fake_slurm(tmp_path: Path, squeue_out: str) -> dict[str, str]:
    """squeue prints ``squeue_out``; sbatch records its argv and prints a job id."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(f"#!/bin/sh\nprintf '%s' '{squeue_out}'\n")
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/sbatch.calls\necho 77\n')
    for tool in ("squeue", "sbatch"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def _run(tmp_path: Path, squeue_out: str) -> tuple[str, bool]:
    env = _fake_slurm(tmp_path, squeue_out)
    lock = tmp_path / "run dir" / "locks" / "submit.lock"
    command = commands.submit_once(str(lock), NAME, commands.sbatch(script_path="/r/s.sbatch"))
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)
    assert lock.exists()  # its folder was created
    return parsers.submitted_once(command, proc.returncode, proc.stdout, proc.stderr)


def test_the_real_shell_adopts_an_active_job_and_submits_nothing(tmp_path: Path) -> None:
    assert _run(tmp_path, "12 COMPLETED\n15 RUNNING\n16 PENDING\n") == ("16", True)
    assert not (tmp_path / "sbatch.calls").exists()


def test_the_real_shell_submits_when_only_ended_jobs_have_the_name(tmp_path: Path) -> None:
    assert _run(tmp_path, "12 COMPLETED\n13 COMPLETING\n") == ("77", False)
    assert (tmp_path / "sbatch.calls").read_text() == "--parsable /r/s.sbatch\n"


def test_the_real_shell_waits_for_the_lock_and_then_fails_with_its_reason(tmp_path: Path) -> None:
    env = _fake_slurm(tmp_path, "")
    lock = tmp_path / "submit.lock"
    lock.touch()
    command = commands.submit_once(str(lock), NAME, commands.sbatch(script_path="/r/s.sbatch"), 1)
    with subprocess.Popen(["flock", str(lock), "sleep", "5"]) as holder:
        try:
            subprocess.run(["sh", "-c", f"until ! flock -n {lock} true; do :; done"], check=True, timeout=5)
            proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, env=env, check=False)
        finally:
            holder.kill()
    assert proc.returncode == 1
    assert f"lock {lock} not acquired within 1 s" in proc.stderr
    assert not (tmp_path / "sbatch.calls").exists()


class LockingHook:
    """The hook calls submit_attempt makes, with submit_once answering ``answer``."""

    def __init__(self, answer: tuple[str, bool]) -> None:
        self.answer = answer
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def run(self, command: str, **_: Any) -> Any:
        return None

    def claim_script_copy(self, base: str, first: int, text: str) -> int:
        return first

    def read_text(self, path: str) -> str:
        return "#!/bin/sh\n"

    def submit_once(self, lock_path: str, name: str, **args: Any) -> tuple[str, bool]:
        self.calls.append((lock_path, name, args))
        return self.answer


def _spec() -> SubmitSpec:
    return SubmitSpec("/r", NAME, f"/r/{NAME}-%j.out", None, "/r/s.sbatch", ["--time=1"], {"A": "1"}, "/r/l")


def test_an_attempt_submitted_under_the_lock_is_a_new_job() -> None:
    hook = LockingHook(("300", False))
    attempt = submit_attempt(hook, _spec(), 2, 1, logging.getLogger(__name__))  # type: ignore[arg-type]
    assert hook.calls == [
        (
            "/r/l",
            NAME,
            {
                "script_path": f"/r/scripts/{NAME}.attempt002.sbatch",
                "sbatch_args": ["--time=1", f"--job-name={NAME}", f"--output=/r/{NAME}-%j.out"],
                "environment": {"A": "1"},
            },
        )
    ]
    assert (attempt.job_id, attempt.reattached, attempt.script_path) == (
        "300",
        False,
        f"/r/scripts/{NAME}.attempt002.sbatch",
    )


def test_an_adopted_job_becomes_a_reattached_attempt_with_its_own_log() -> None:
    hook = LockingHook(("250", True))
    attempt = submit_attempt(hook, _spec(), 1, 3, logging.getLogger(__name__))  # type: ignore[arg-type]
    assert (attempt.attempt, attempt.job_id, attempt.log_path, attempt.script_path) == (
        1,
        "250",
        f"/r/{NAME}-250.out",
        "",
    )
    assert (attempt.reattached, attempt.try_number) == (True, 3)
