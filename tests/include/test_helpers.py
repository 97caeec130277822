"""convert_helper.sh / cooldown_helper.sh on crafted run folders: glob trap, tracker, completeness, locks."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.fixtures import checkpoint_layouts as layouts

HELPERS = Path(__file__).resolve().parents[2] / "include" / "helpers"


def helper(name: str, *args: object) -> str:
    proc = subprocess.run(
        ["bash", str(HELPERS / name), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def make_ckpt(ckpts: Path, it: int, *, complete: bool = True, dist: bool = False) -> Path:
    """A Megatron save with its real format markers; incomplete: killed before its last writes."""
    if dist:
        return layouts.torch_dist(ckpts, it, stop_before=None if complete else ".metadata", tracker=False)
    d = layouts.legacy(ckpts, it, tracker=False)
    if not complete:
        layouts.cut_short(d / "mp_rank_00" / "model_optim_rng.pt")
    return d


def set_tracker(ckpts: Path, it: int) -> None:
    ckpts.mkdir(parents=True, exist_ok=True)
    (ckpts / "latest_checkpointed_iteration.txt").write_text(f"{it}\n")


# ---- cooldown_helper.sh -------------------------------------------------------------------------


def test_cooldown_glob_trap_does_not_match_longer_iteration(tmp_path: Path) -> None:
    pre = tmp_path / "exp" / "checkpoints"
    make_ckpt(pre, 12000)  # the seed's iter_[0]*2000 glob matches this for ITER=2000
    set_tracker(pre, 12000)
    assert helper("cooldown_helper.sh", tmp_path, "exp", 2000, "1B") == "0"
    assert not (tmp_path / "exp" / "cooldown_s1B").exists()


def test_cooldown_branches_exactly_and_is_idempotent(tmp_path: Path) -> None:
    pre = tmp_path / "exp" / "checkpoints"
    for it in (2000, 12000):
        make_ckpt(pre, it)
    set_tracker(pre, 12000)
    cd = tmp_path / "exp" / "cooldown_s1B" / "checkpoints"
    assert helper("cooldown_helper.sh", tmp_path, "exp", 2000, "1B") == "1"
    assert (cd / "iter_0002000").resolve() == (pre / "iter_0002000").resolve()
    assert (cd / "latest_checkpointed_iteration.txt").read_text().strip() == "2000"
    assert sorted(p.name for p in cd.iterdir()) == ["iter_0002000", "latest_checkpointed_iteration.txt"]

    # The cooldown trains and saves; a resubmission's start condition must not reset its tracker.
    make_ckpt(cd, 2100)
    set_tracker(cd, 2100)
    assert helper("cooldown_helper.sh", tmp_path, "exp", 2000, "1B") == "1"
    assert (cd / "latest_checkpointed_iteration.txt").read_text().strip() == "2100"


@pytest.mark.parametrize(
    ("tracker", "complete", "dist"),
    [(1000, True, False), (2000, False, False), (2000, False, True)],
    ids=["tracker-behind", "half-written-legacy", "half-written-torch-dist"],
)
def test_cooldown_waits_for_tracker_and_complete_files(
    tmp_path: Path, tracker: int, complete: bool, dist: bool
) -> None:
    pre = tmp_path / "exp" / "checkpoints"
    make_ckpt(pre, 2000, complete=complete, dist=dist)
    set_tracker(pre, tracker)
    assert helper("cooldown_helper.sh", tmp_path, "exp", 2000, "1B") == "0"
    assert not (
        tmp_path / "exp" / "cooldown_s1B" / "checkpoints" / "latest_checkpointed_iteration.txt"
    ).exists()


def test_cooldown_iter_zero_starts_from_scratch(tmp_path: Path) -> None:
    make_ckpt(tmp_path / "exp" / "checkpoints", 0)  # the seed linked every iter_0…0 here
    assert helper("cooldown_helper.sh", tmp_path, "exp", 0, "100M") == "1"
    cd = tmp_path / "exp" / "cooldown_s100M" / "checkpoints"
    assert cd.is_dir()
    assert list(cd.iterdir()) == []


def test_cooldown_bad_arguments_print_zero_with_message(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(HELPERS / "cooldown_helper.sh"), str(tmp_path), "exp", "2k", "1B"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert (proc.returncode, proc.stdout.strip()) == (0, "0")
    assert "ITER must be a non-negative integer, got '2k'" in proc.stderr


# ---- convert_helper.sh --------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    ckpts = tmp_path / "run" / "checkpoints"
    make_ckpt(ckpts, 20)
    make_ckpt(ckpts, 40)
    set_tracker(ckpts, 40)
    for sub in ("converted_checkpoints", "in_progress_checkpoints"):
        (tmp_path / "run" / sub).mkdir()
    return tmp_path / "run"


def test_convert_helper_counts_ready_unconverted(run_dir: Path) -> None:
    assert helper("convert_helper.sh", run_dir) == "1"
    (run_dir / "converted_checkpoints" / "iter_20.done").touch()
    (run_dir / "converted_checkpoints" / "iter_40.done").touch()
    assert helper("convert_helper.sh", run_dir) == "0"


def test_convert_helper_ignores_partial_and_untracked_and_symlinked(run_dir: Path, tmp_path: Path) -> None:
    (run_dir / "converted_checkpoints" / "iter_20.done").touch()
    (run_dir / "converted_checkpoints" / "iter_40.done").touch()
    ckpts = run_dir / "checkpoints"
    make_ckpt(ckpts, 60, complete=False)  # being written
    make_ckpt(ckpts, 80)  # complete but the tracker (40) has not reached it
    other = make_ckpt(tmp_path / "pretrain", 10)
    (ckpts / "iter_0000010").symlink_to(other)  # a cooldown's branch point belongs to the pretrain
    (ckpts / "iter_12").mkdir()  # not iter_%07d
    assert helper("convert_helper.sh", run_dir) == "0"
    set_tracker(ckpts, 80)
    assert helper("convert_helper.sh", run_dir) == "1"


def ready_iters(run: Path) -> list[int]:
    proc = subprocess.run(
        ["bash", "-c", f'source {HELPERS / "ckpt_lib.sh"}; autoexp_ready_iters "$1"', "-", str(run)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return [int(x) for x in proc.stdout.split()]


def test_a_cut_short_checkpoint_is_never_ready_however_far_the_tracker_moved(tmp_path: Path) -> None:
    ckpts = tmp_path / "run" / "checkpoints"
    layouts.legacy(ckpts, 400, ranks=("mp_rank_00", "mp_rank_01"))
    layouts.cut_short(
        layouts.legacy(ckpts, 500, ranks=("mp_rank_00", "mp_rank_01")) / "mp_rank_01" / "model_optim_rng.pt"
    )
    layouts.legacy(ckpts, 600, ranks=("mp_rank_00",))  # rank 1 never started writing
    layouts.legacy(ckpts, 800, ranks=("mp_rank_00", "mp_rank_01"))
    layouts.torch_dist(ckpts, 700, stop_before="metadata.json", tracker=False)
    cut = layouts.torch_dist(ckpts, 750, tracker=False)
    layouts.cut_short(cut / "metadata.json")
    assert ready_iters(tmp_path / "run") == [400, 800]
    # Nor may the convert template be asked for it (it checks the same list before converting).
    assert helper("convert_helper.sh", tmp_path / "run", 500) == "1"  # only 800 is pending


def test_convert_helper_min_iter_and_seed_call_form(run_dir: Path) -> None:
    (run_dir / "converted_checkpoints" / "iter_40.done").touch()
    assert helper("convert_helper.sh", run_dir, 30) == "0"
    assert helper("convert_helper.sh", run_dir, "ignored", 30) == "0"  # the seed's $3
    assert helper("convert_helper.sh", run_dir, 20) == "1"


def test_live_lock_blocks_and_stale_locks_are_recovered(run_dir: Path) -> None:
    (run_dir / "converted_checkpoints" / "iter_40.done").touch()
    lock = run_dir / "in_progress_checkpoints" / "iter_20.lock"
    host = socket.gethostname()
    lock.write_text(f"pid {os.getpid()} {host}\n")  # this test process: alive
    assert helper("convert_helper.sh", run_dir) == "0"

    dead = subprocess.Popen(["true"])
    dead.wait()
    lock.write_text(f"pid {dead.pid} {host}\n")  # owner gone: stale
    assert helper("convert_helper.sh", run_dir) == "1"

    lock.write_text("")  # the seed's owner-less lock: live until the TTL passes
    assert helper("convert_helper.sh", run_dir) == "0"
    old = time.time() - 7 * 3600
    os.utime(lock, (old, old))
    assert helper("convert_helper.sh", run_dir) == "1"


def test_failure_cap_stops_poison_checkpoint(run_dir: Path) -> None:
    (run_dir / "converted_checkpoints" / "iter_40.done").touch()
    (run_dir / "in_progress_checkpoints" / "iter_20.failures").write_text("a\nb\n")
    assert helper("convert_helper.sh", run_dir) == "1"
    (run_dir / "in_progress_checkpoints" / "iter_20.failures").write_text("a\nb\nc\n")
    assert helper("convert_helper.sh", run_dir) == "0"


def test_convert_helper_without_checkpoints_prints_zero(tmp_path: Path) -> None:
    assert helper("convert_helper.sh", tmp_path / "nothing") == "0"


def test_helpers_are_shellcheck_clean() -> None:
    # shellcheck comes with scripts/bootstrap (CI installs it): a missing binary fails here.
    scripts = sorted(HELPERS.glob("*.sh"))
    proc = subprocess.run(
        ["shellcheck", "-x", *map(str, scripts)], capture_output=True, text=True, check=False, cwd=HELPERS
    )
    assert proc.returncode == 0, proc.stdout


def _container(runtime: str, gpus: int, extra: str = "") -> subprocess.CompletedProcess[str]:
    script = (
        f'source {HELPERS / "container_runtime.sh"}; autoexp_container "$1" "$2" /img/x.sif "$3" || exit $?; '
        'echo "${#CONTAINER[@]}: ${CONTAINER[*]}"'
    )
    # The login shell's old variable must no longer matter: only the argument (the YAML's CONTAINER_ARGS).
    env = {**os.environ, "AUTOEXP_CONTAINER_ARGS": "--bind /from/the/shell"}
    return subprocess.run(
        ["bash", "-uc", script, "-", runtime, str(gpus), extra],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_container_runtime_prefix_for_each_runtime() -> None:
    apptainer = _container("apptainer", 4, "--bind /p/data1").stdout
    assert apptainer == "6: apptainer exec --nv --bind /p/data1 /img/x.sif\n"
    assert _container("singularity", 0).stdout == "3: singularity exec /img/x.sif\n"
    assert _container("none", 4).stdout == "0: \n"
    bad = _container("docker", 0)
    assert bad.returncode == 2
    assert "CONTAINER_RUNTIME must be apptainer, singularity or none, got 'docker'" in bad.stderr


def _site_env(modules: str, job_env: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    script = (
        f'{prelude}source {HELPERS / "site_env.sh"}; autoexp_site_env "$1" "$2" || exit $?; '
        'echo "A=${A:-unset} B=${B:-unset} LOADED=${LOADED:-none}"'
    )
    return subprocess.run(
        ["bash", "-uc", script, "-", modules, job_env], capture_output=True, text=True, check=False
    )


def test_site_env_exports_job_env_words_and_refuses_malformed_ones() -> None:
    assert _site_env("", "").stdout == "A=unset B=unset LOADED=none\n"
    assert _site_env("", "A=1 B=x=y").stdout == "A=1 B=x=y LOADED=none\n"
    bad = _site_env("", "A=1 not-a-name=2")
    assert bad.returncode == 2
    assert bad.stderr == "[autoexp] JOB_ENV word 'not-a-name=2' is not NAME=VALUE\n"


def test_site_env_loads_modules_or_says_why_not() -> None:
    # A stand-in for Lmod's shell function (this machine has no module system): it records its arguments
    # and fails for a module named "missing".
    fake = 'module() { [ "$1" = load ] || return 1; shift; [[ " $* " != *" missing "* ]] && LOADED="$*"; }; '
    assert _site_env("gcc cuda", "A=1", fake).stdout == "A=1 B=unset LOADED=gcc cuda\n"
    failed = _site_env("gcc missing", "", fake)
    assert failed.returncode == 2
    assert failed.stderr == "[autoexp] module load gcc missing failed (the YAML's MODULES)\n"
    absent = _site_env("gcc", "")
    assert absent.returncode == 2
    assert "MODULES is set (gcc) but this node has no 'module' command" in absent.stderr
