"""sbatch templates: documented variables only, doubled braces, job-name line, shellcheck-clean renders."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.include.templates import CONVERT, REPO, TRAIN, demo_params, render, template_variables

DOC = REPO / "docs" / "cluster-tools.md"


def documented_variables() -> set[str]:
    # First-column backticked names of the "Template variables" tables in docs/cluster-tools.md.
    section = (
        DOC.read_text().split("## Template variables", 1)[1].split("### Environment read at run time", 1)[0]
    )
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Za-z_0-9]+)`", line.split("|")[1]))
    return names


@pytest.mark.parametrize("template", [TRAIN, CONVERT], ids=["train", "convert"])
def test_templates_use_only_documented_variables(template: Path) -> None:
    used = template_variables(template)
    assert used <= documented_variables(), sorted(used - documented_variables())
    assert {"name", "output_file", "AUTOEXP_INCLUDE", "PYTHON"} <= used


@pytest.mark.parametrize("template", [TRAIN, CONVERT], ids=["train", "convert"])
def test_rendered_template_is_valid_bash_with_job_name(template: Path, tmp_path: Path) -> None:
    params = demo_params(tmp_path / "logs", tmp_path / "data" / "d", tmp_path / "tok")
    script = render(template, params, tmp_path / "job.sbatch")
    text = script.read_text()
    assert "#SBATCH --job-name=exp_PRETRAIN_TRAIN\n" in text  # AutoExperiment's build assertion
    assert f"#SBATCH --output={params['output_file']}\n" in text
    assert "${SLURM_JOB_ID:-none}" in text  # doubled braces became bash's
    assert "{{" not in text
    subprocess.run(["bash", "-n", str(script)], check=True)
    proc = subprocess.run(
        ["shellcheck", "-S", "warning", str(script)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout


def test_cooldown_gets_no_warmup_and_seed_ckpt_format(tmp_path: Path) -> None:
    params = demo_params(tmp_path / "logs", tmp_path / "d", tmp_path / "t", PHASE="COOLDOWN", TP=2)
    text = render(TRAIN, params, tmp_path / "job.sbatch").read_text()
    assert 'PHASE="COOLDOWN"' in text
    assert 'if [ "$PHASE" = "COOLDOWN" ]; then WARMUP_ITERS=0; else WARMUP_ITERS=3; fi' in text
    assert "TP=2 PP=1" in text


def test_missing_variable_fails_rendering(tmp_path: Path) -> None:
    params = demo_params(tmp_path / "logs", tmp_path / "d", tmp_path / "t")
    del params["EVAL_TASKS"]
    with pytest.raises(KeyError, match="EVAL_TASKS"):
        render(CONVERT, params, tmp_path / "job.sbatch")


def test_train_template_stops_before_the_time_limit_by_default(tmp_path: Path) -> None:
    """No YAML variable needed: the signal, the handler and the duration (from TIME) are always there."""
    text = render(
        TRAIN, demo_params(tmp_path / "l", tmp_path / "d", tmp_path / "t"), tmp_path / "j.sh"
    ).read_text()
    assert "#SBATCH --signal=B:TERM@120\n" in text
    assert "    --exit-signal-handler\n" in text
    assert 'EXIT_MINUTES="$(autoexp_exit_minutes "15" "$EXIT_MARGIN_MINUTES" "$SECONDS")"' in text
    assert 'EXIT_MARGIN_MINUTES="${AUTOEXP_EXIT_MARGIN_MINUTES:-10}"' in text
    assert 'autoexp_cluster/ckpt_check.py" "$CHECKPOINT_PATH"' in text


@pytest.mark.parametrize(
    ("limit", "margin", "elapsed", "minutes"),
    [("360", 10, 5, "349"), ("3", 1, 3, "1"), ("2", 1, 3, ""), ("02:00:00", 10, 0, "110"),
     ("1-00:30", 10, 0, "1460"), ("45:30", 5, 0, "40"), ("2:30", 1, 29, "1"), ("2:30", 1, 31, ""),
     ("UNLIMITED", 10, 0, ""), ("1", 10, 0, "")],
)  # fmt: skip
def test_exit_minutes_from_any_sbatch_time_form(limit: str, margin: int, elapsed: int, minutes: str) -> None:
    helper = REPO / "include" / "helpers" / "time_limit.sh"
    proc = subprocess.run(
        ["bash", "-c", f'source "{helper}"; autoexp_exit_minutes "$1" "$2" "$3"', "x", limit, str(margin),
         str(elapsed)], capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert proc.stdout.strip() == minutes
