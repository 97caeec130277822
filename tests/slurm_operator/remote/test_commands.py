"""The remote shell strings, exactly; quoting and validation."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from slurm_operator.model.records import RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.remote import commands, parsers
from slurm_operator.remote.commands import SECTION_MARK


def test_sbatch_inline_and_path() -> None:
    assert commands.sbatch() == "sbatch --parsable"
    assert (
        commands.sbatch(script_path="/p/my job.sh", sbatch_args=["--time=1", "--job-name=a b"])
        == "sbatch --parsable --time=1 '--job-name=a b' '/p/my job.sh'"
    )


def test_excluded_nodes_join_the_callers_exclude_or_come_first() -> None:
    assert commands.exclude_args(["--time=1"], ["n2", "n3"]) == ["--exclude=n2,n3", "--time=1"]
    assert commands.exclude_args(["--exclude=n1,n2", "-N2"], ["n2", "n3"]) == ["--exclude=n1,n2,n3", "-N2"]
    assert commands.exclude_args(["--time=1"], []) == ["--time=1"]
    # sbatch quotes every word; a name that is no node name never reaches a shell.
    args = commands.exclude_args(["--job-name=a b"], ["gpu-01.ib"])
    assert commands.sbatch(sbatch_args=args) == "sbatch --parsable --exclude=gpu-01.ib '--job-name=a b'"
    with pytest.raises(ValueError, match="not a node name: 'n1;reboot'"):
        commands.exclude_args([], ["n1;reboot"])


def test_sbatch_environment_goes_through_env() -> None:
    cmd = commands.sbatch(script_path="/j.sh", environment={"CKPT_ITER": "100", "X": "a,b;$(rm -rf /)"})
    assert cmd == "env -- CKPT_ITER=100 'X=a,b;$(rm -rf /)' sbatch --parsable /j.sh"


@pytest.mark.parametrize("name", ["1X", "A-B", "", "A B"])
def test_sbatch_refuses_bad_env_names(name: str) -> None:
    with pytest.raises(ValueError, match="not a valid environment variable name"):
        commands.sbatch(environment={name: "v"})


def test_sbatch_refuses_empty_path() -> None:
    with pytest.raises(ValueError, match="empty script path"):
        commands.sbatch(script_path="")


@pytest.mark.parametrize("bad", ["", "12;rm", "abc", "1_", "1.batch", "-1"])
def test_job_ids_are_validated(bad: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm job id"):
        commands.job_id(bad)


def test_job_states_is_one_sh_command() -> None:
    cmd = commands.job_states(["3", "4_1", "3"])
    argv = shlex.split(cmd)
    assert argv[:2] == ["sh", "-c"]
    assert argv[3:] == ["sh", "3,4_1"]
    assert f'sacct -X -P -n -o {commands.SACCT_FORMAT} -j "$1"' in argv[2]
    with pytest.raises(ValueError, match="no job ids"):
        commands.job_states([])


def test_job_states_script_is_valid_posix_sh() -> None:
    script = shlex.split(commands.job_states(["1"]))[2]
    proc = subprocess.run(["sh", "-n", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_find_active() -> None:
    assert commands.find_active("autoexp-x.1") == (
        f"squeue --me -h -r -o '{commands.SQUEUE_FORMAT}' --name=autoexp-x.1"
    )
    with pytest.raises(ValueError, match="not a usable Slurm job name"):
        commands.find_active("a b")
    with pytest.raises(ValueError, match="not a usable Slurm job name"):
        commands.find_active("a,b")


def test_scancel() -> None:
    assert commands.scancel("12") == "scancel 12"
    assert commands.scancel("12_3", signal="USR1") == "scancel --signal=USR1 12_3"
    assert commands.scancel("12", signal="10") == "scancel --signal=10 12"
    with pytest.raises(ValueError, match="not a signal"):
        commands.scancel("12", signal="USR1; reboot")


def test_mkdir_p() -> None:
    assert commands.mkdir_p("/a b/c") == "mkdir -p -- '/a b/c'"
    with pytest.raises(ValueError, match="not a usable remote path"):
        commands.mkdir_p("")


def test_plan_submit() -> None:
    assert commands.plan_submit("s", None, None) == commands.SubmitPlan(
        upload=None, script_path=None, stdin="s"
    )
    assert commands.plan_submit("s", None, "/u.sh") == commands.SubmitPlan("/u.sh", "/u.sh", None)
    assert commands.plan_submit(None, "/p.sh", None) == commands.SubmitPlan(None, "/p.sh", None)


def test_prepare_submit_gives_both_hooks_the_plan_and_the_quoted_command() -> None:
    plan, command = commands.prepare_submit(
        script_path="/p q.sh", sbatch_args=["--time=1"], environment={"A": "x y"}
    )
    assert plan == commands.SubmitPlan(None, "/p q.sh", None)
    assert command == commands.sbatch(
        script_path="/p q.sh", sbatch_args=["--time=1"], environment={"A": "x y"}
    )
    assert "'/p q.sh'" in command


def test_job_states_asks_scontrol_for_jobs_squeue_shows_finished(tmp_path: Path) -> None:
    # Fake Slurm commands on purpose: accounting lagging behind a job that just ended cannot be
    # produced on demand on the real cluster.
    fakes = {
        "sacct": "exit 0",  # accounting has not recorded the jobs yet
        "squeue": "printf '5|done|COMPLETED|0:01|S|E|n1|None\\n6|busy|RUNNING|0:01|S|N/A|n1|None\\n'",
        "scontrol": 'echo "JobId=$4 JobName=done JobState=COMPLETED Reason=None ExitCode=0:0"',
    }
    for name, body in fakes.items():
        (tmp_path / name).write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    proc = subprocess.run(
        ["sh", "-c", commands.job_states(["5", "6"])], capture_output=True, text=True, env=env
    )
    states = parsers.parse_job_states(proc.stdout, proc.stderr, ["5", "6"])
    assert (states.records["5"].state, states.records["5"].exit_code) == (SlurmState.COMPLETED, 0)
    assert (states.records["6"].state, states.records["6"].exit_code) == (SlurmState.RUNNING, None)
    assert "JobId=6" not in proc.stdout  # scontrol is asked only about finished jobs


def test_job_states_with_watch_reads_the_clock_and_stats_first_in_the_same_command() -> None:
    plain = commands.job_states(["3"])
    watched = commands.job_states(["3"], watch=True)
    script = shlex.split(watched)[2]
    assert script.startswith(
        f"echo \"{SECTION_MARK} files 0\"; date +%s\nxargs -r -d '\\n' stat -c '%Y %s %n' -- 2>/dev/null\n"
    )
    assert script.endswith(shlex.split(plain)[2])  # then exactly the plain state query
    assert shlex.split(watched)[3:] == ["sh", "3"]  # the paths are not on the command line


def test_watch_input_is_one_path_per_line_and_refuses_line_breaks() -> None:
    assert commands.watch_input(["/a b/log", "-x"]) == "/a b/log\n-x\n"
    with pytest.raises(ValueError, match="not a watchable remote path"):
        commands.watch_input(["/a\nb"])
    with pytest.raises(ValueError, match="not a usable remote path"):
        commands.watch_input([""])


def test_watched_paths_are_statted_verbatim_by_the_real_shell(tmp_path: Path) -> None:
    """Runs the command under a real sh with real stat; only sacct is a fake (no cluster needed)."""
    (tmp_path / "bin").mkdir()
    sacct = tmp_path / "bin" / "sacct"
    sacct.write_text("#!/bin/sh\necho '5|n|RUNNING|0:0|00:01:00|S|Unknown|n1|cpu=1|None'\n")
    sacct.chmod(0o755)
    odd = tmp_path / "a dir" / "-log $(touch pwned) 'q'.out"
    odd.parent.mkdir()
    odd.write_text("hello\n")
    os.utime(odd, (1_700_000_000, 1_700_000_000))
    missing = tmp_path / "nope.txt"
    paths = [str(odd), str(missing)]
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}
    proc = subprocess.run(
        ["sh", "-c", commands.job_states(["5"], watch=True)],
        input=commands.watch_input(paths),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    states = parsers.parse_job_states(proc.stdout, proc.stderr, ["5"], paths)
    assert states.records["5"].state is SlurmState.RUNNING
    assert states.remote_now is not None
    assert abs(states.remote_now - time.time()) < 60
    assert states.files[str(odd)] == RemoteStat(str(odd), exists=True, size=6, mtime=1_700_000_000.0)
    assert states.files[str(missing)] == RemoteStat(str(missing), exists=False)
    assert not (tmp_path / "pwned").exists()  # the path was never read by a shell


def test_accounting_reads_names_from_stdin_and_needs_a_start() -> None:
    command = commands.accounting("2026-11-01")
    argv = shlex.split(command)
    assert argv[:2] == ["sh", "-c"]
    assert argv[-2:] == ["sh", "2026-11-01"]
    assert f'sacct -X -D -P -n -o {commands.SACCT_FORMAT} -S "$1" --name="$names"' in argv[2]
    assert commands.accounting_input(["a_train", "b_convert_1", "a_train"]) == "a_train\nb_convert_1\n"


@pytest.mark.parametrize("since", ["yesterday", "2026-11-01; rm -rf /", ""])
def test_accounting_refuses_a_bad_start(since: str) -> None:
    with pytest.raises(ValueError, match="not a sacct start time"):
        commands.accounting(since)


@pytest.mark.parametrize("name", ["a,b", "two words", ""])
def test_accounting_refuses_names_sacct_would_split(name: str) -> None:
    with pytest.raises(ValueError, match="not a usable Slurm job name"):
        commands.accounting_input([name])


def test_accounting_script_passes_the_names_as_one_list(tmp_path: Path) -> None:
    """The script run by a real sh against a stand-in sacct that prints its argv (the real one is
    exercised by the campaign-report e2e test)."""
    fake = tmp_path / "sacct"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    argv = shlex.split(commands.accounting("2026-11-01"))
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    out = subprocess.run(
        argv, input="x_train\ny_train\n", capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.splitlines()[-3:] == ["-S", "2026-11-01", "--name=x_train,y_train"]
    empty = subprocess.run(argv, input="", capture_output=True, text=True, env=env, check=True)
    assert empty.stdout == ""


def test_job_states_asks_squeue_start_about_the_jobs_sacct_lists_pending() -> None:
    script = shlex.split(commands.job_states(["1"]))[2]
    assert commands.PENDING_FORMAT == "%i|%r|%S"
    assert (
        "  pending=$(printf '%s\\n' \"$out\" |\n"
        "    awk -F'|' 'NF >= 10 && $(NF-7) == \"PENDING\" && $1 ~ /^[0-9]+(_[0-9]+)?$/ "
        '{printf ",%s", $1}\')\n'
        '  if [ -n "$pending" ]; then\n'
        "    est=$(squeue --start -h -r -o '%i|%r|%S' -j \"${pending#,}\"); erc=$?\n"
        f'    echo "{SECTION_MARK} pending $erc"; printf \'%s\\n\' "$est"\n'
        "  fi\n"
    ) in script
    # Inside the sacct branch, before the fallback that reuses $out and $rc.
    assert script.index("squeue --start") < script.index('missing=""')


def _fake_slurm(tmp_path: Path, sacct: str, squeue_start: str) -> dict[str, str]:
    """sacct printing ``sacct``; squeue printing ``squeue_start`` and logging its argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "sacct.out").write_text(sacct)
    (tmp_path / "squeue.out").write_text(squeue_start)
    (bin_dir / "sacct").write_text(f"#!/bin/sh\ncat {tmp_path / 'sacct.out'}\n")
    (bin_dir / "squeue").write_text(
        f'#!/bin/sh\necho "$*" >> {tmp_path / "squeue.argv"}\ncat {tmp_path / "squeue.out"}\n'
    )
    for name in ("sacct", "squeue"):
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_the_pending_jobs_are_asked_of_squeue_start_in_the_same_command(tmp_path: Path) -> None:
    """The real shell runs the command; sacct and squeue print what the local Slurm 22.05 printed
    (tests/slurm_operator/remote/data/pending/job_states.txt): jobs 4 and 5 pend, one with a '|' in
    its name."""
    sacct = (
        "1|wrap|RUNNING|0:0|00:00:56|2026-12-03T08:55:05|Unknown|node59929|billing=1,cpu=1,node=1|None\n"
        "4|w|r|ap|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned||None\n"
        "5|wrap|PENDING|0:0|00:00:00|Unknown|Unknown|None assigned||None\n"
    )
    env = _fake_slurm(tmp_path, sacct, "4|Resources|2027-12-03T08:55:05\n5|Priority|N/A\n")
    proc = subprocess.run(
        ["sh", "-c", commands.job_states(["1", "4", "5"])], capture_output=True, text=True, env=env
    )
    assert (
        tmp_path / "squeue.argv"
    ).read_text() == "--start -h -r -o %i|%r|%S -j 4,5\n"  # once, pending only
    states = parsers.parse_job_states(proc.stdout, proc.stderr, ["1", "4", "5"])
    rec = states.records
    assert (rec["4"].reason, rec["4"].expected_start) == ("Resources", "2027-12-03T08:55:05")
    assert (rec["5"].reason, rec["5"].expected_start) == ("Priority", None)
    assert (rec["1"].state, rec["1"].expected_start) == (SlurmState.RUNNING, None)


def test_no_pending_job_no_squeue(tmp_path: Path) -> None:
    sacct = "1|wrap|RUNNING|0:0|00:00:56|2026-12-03T08:55:05|Unknown|node59929|cpu=1|None\n"
    env = _fake_slurm(tmp_path, sacct, "")
    proc = subprocess.run(["sh", "-c", commands.job_states(["1"])], capture_output=True, text=True, env=env)
    assert "pending" not in proc.stdout
    assert not (tmp_path / "squeue.argv").exists()
