"""The `autoexp` command: validate, list, render, show; one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoexp.cli.main import main
from autoexp.config.builtins import builtin_values

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "config" / "scaling_exps.yaml"
WORKED = ROOT / "tests" / "autoexp" / "config" / "data" / "worked" / "config.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_validate_shipped_config(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", str(SHIPPED))
    assert (code, err) == (0, "")
    assert out == f"{SHIPPED}: OK: 1080 jobs, 90 experiments, 2 templates\n"


def test_list_table_shows_distinguishing_axes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", str(WORKED), "PHASE=COOLDOWN", "LR=0.001")
    assert code == 0
    assert out.splitlines() == [
        "name                       MODEL_SIZE  CD",
        "small_lr0.001_COOLDOWNc10  S           c10",
        "small_lr0.001_COOLDOWNc20  S           c20",
        "large_lr0.001_COOLDOWNc10  L           c10",
        "large_lr0.001_COOLDOWNc20  L           c20",
    ]


def test_list_json_keeps_types_and_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", str(WORKED), "--format", "json", "-f", "NODES=4")
    rows = json.loads(out)
    assert code == 0
    assert [r["name"] for r in rows][:3] == [
        "small_lr0.001_PRETRAIN",
        "small_lr0.001_COOLDOWNc10",
        "small_lr0.001_COOLDOWNc20",
    ]
    assert rows[4]["params"]["GBS"] == 128
    assert rows[4]["params"]["WD"] == 0.03333333333333333
    # The built-ins (CONFIG_DIR, CONVERT_*, site settings) come first, then the file's keys in order.
    builtins = len(builtin_values(WORKED))
    assert list(rows[4]["params"])[builtins : builtins + 3] == ["cmd", "check_interval_secs", "template"]
    assert next(iter(rows[4]["params"])) == "CONFIG_DIR"


def test_render_one_job_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", str(WORKED), "--job", "large_lr0.003_PRETRAIN")
    assert code == 0
    assert (
        out == "#!/bin/bash\n#SBATCH --job-name=large_lr0.003_PRETRAIN\n"
        "echo large 0.003 64 0.03333333333333333 PRETRAIN ${HOME}\n"
    )


def test_render_all_to_out_dir_has_no_other_side_effect(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "render", str(WORKED), "--out", "scripts")
    assert code == 0
    assert err == "wrote 12 scripts to scripts\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(
        ["scripts"] + [f"{n}.sbatch" for n in _names(capsys)]
    )


def _names(capsys: pytest.CaptureFixture[str]) -> list[str]:
    _, out, _ = run(capsys, "list", str(WORKED), "--format", "json")
    return [row["name"] for row in json.loads(out)]


def test_render_needs_a_job_when_several(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "render", str(WORKED))
    assert (code, out) == (2, "")
    assert err.endswith(":1: 12 jobs match; name one with --job or write all with --out DIR\n")


def test_show_prints_value_and_origin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", str(WORKED), "small_lr0.003_COOLDOWNc10")
    assert code == 0
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert lines["LR"].split()[1] == "0.003"
    assert lines["LR"].endswith("config.yaml:8)")
    assert lines["S"].split()[1] == '"HIDDEN"'
    assert lines["S"].endswith("config.yaml:6)")
    code, _, err = run(capsys, "show", str(WORKED), "small_lr0.003_COOLDOWNc1")
    assert code == 2
    assert "no job named 'small_lr0.003_COOLDOWNc1'; did you mean small_lr0.003_COOLDOWNc10" in err


def test_config_error_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text('cmd: c\ntemplate: t\nsbatch_script: s\noutput_file: o\nname: "{A}"\nA: "x{A}"\n')
    code, out, err = run(capsys, "validate", str(bad))
    assert (code, out) == (2, "")
    assert err == f"{bad}:6: A: reference cycle A -> A (job #1)\n"


def test_installed_entry_point_runs_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("A: [1, 2\n")
    result = subprocess.run(
        [sys.executable, "-m", "autoexp", "validate", str(bad)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert result.stderr == f"{bad}:2: malformed YAML: expected ',' or ']', but got '<stream end>'\n"


def test_render_out_refuses_names_that_escape_the_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text('cmd: c\ntemplate: t\nsbatch_script: s\noutput_file: o\nname: "../{X}"\nX: evil\n')
    code, _, err = run(capsys, "render", str(config), "--out", "out")
    assert code == 2
    assert err == "c.yaml:5: name: job name '../evil' cannot be a file name\n"
    assert not (tmp_path / "out").exists()
    assert not (tmp_path.parent / "evil.sbatch").exists()


@pytest.mark.parametrize("config", ["demo.yaml", "scaling_exps.yaml"])
def test_shipped_configs_mean_the_same_from_a_bare_shell(tmp_path: Path, config: str) -> None:
    """Issue 15: nothing but PATH and the package's own path in the environment, another working folder."""
    import autoexp

    bare = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(autoexp.__file__).parents[1])}
    path = ROOT / "config" / config

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "autoexp", *argv],
            env=bare,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    validated = cli("validate", str(path))
    assert (validated.returncode, validated.stderr) == (0, "")
    assert validated.stdout.startswith(f"{path}: OK: ")
    if config == "demo.yaml":
        shown = cli("show", str(path), "demo_tiny_lr0.002_bs4_PRETRAIN_TRAIN").stdout
        rows = [line.split(None, 1) for line in shown.splitlines()]
        values = {key: json.loads(rest.rsplit("  (", 1)[0]) for key, rest in rows}
        assert values["PYTHON"] == f"{ROOT}/config/../.venv/bin/python"
        assert values["LOGS"] == f"{ROOT}/config/../.state/demo/campaign/runs"
        assert values["CONFIG_DIR"] == f"{ROOT}/config"
