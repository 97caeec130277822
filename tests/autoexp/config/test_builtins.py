"""Built-in variables (config folder, site settings, conversion resources), overridable by the YAML."""

from __future__ import annotations

from pathlib import Path

from autoexp.config import Job, expand, load_config
from autoexp.config.builtins import SITE_DEFAULTS, builtin_values

BASE = """
cmd: "sbatch {sbatch_script}"
template: t.sh
sbatch_script: "{CONFIG_DIR}/out/{name}.sbatch"
output_file: o.out
"""


def _jobs(tmp_path: Path, text: str, overrides: tuple[str, ...] = ()) -> list[Job]:
    path = tmp_path / "sub" / "c.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(BASE + text)
    return expand(load_config(path, overrides))


def test_defaults_and_config_dir_without_any_environment(tmp_path: Path) -> None:
    (job,) = _jobs(tmp_path, "name: j\n")
    assert job.params["CONFIG_DIR"] == str(tmp_path / "sub")
    assert job.sbatch_script == f"{tmp_path}/sub/out/j.sbatch"
    assert {k: job.params[k] for k in SITE_DEFAULTS} == {k: v for k, (v, _) in SITE_DEFAULTS.items()}
    assert job.params["CONVERT_GPUS_PER_NODE"] == 1
    assert job.origin("CONVERT_TIME") == "<autoexp built-in>:1"


def test_yaml_top_level_grid_option_and_override_each_win(tmp_path: Path) -> None:
    text = "name: j{MODE}\nCONVERT_TIME: 30\nMODE:\n  - A: {CONVERT_GPUS_PER_NODE: 2}\n  - B: {X: 1}\n"
    a, b = _jobs(tmp_path, text, ("SOCKET_IFNAME=ib0", "CONVERT_TIME=45"))
    assert (a.params["CONVERT_GPUS_PER_NODE"], b.params["CONVERT_GPUS_PER_NODE"]) == (2, 1)
    assert a.params["CONVERT_TIME"] == 45  # -f beats the file, as for any key
    assert a.params["SOCKET_IFNAME"] == "ib0"
    assert a.origin("CONVERT_TIME") == "<-f CONVERT_TIME=45>:1"
    (own,) = _jobs(tmp_path, "name: j\nCONFIG_DIR: /elsewhere\n")
    assert own.sbatch_script == "/elsewhere/out/j.sbatch"
    assert own.origin("CONFIG_DIR").endswith("c.yaml:7")


def test_every_builtin_is_documented_with_its_default() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "cluster-tools.md").read_text()
    table = doc.split("### Built-in variables", 1)[1].split("###", 1)[0]
    cells = [line.split("|") for line in table.splitlines() if line.startswith("| `")]
    rows = {cell[1].strip(" `"): cell[2].strip() for cell in cells}
    assert set(rows) == set(builtin_values(Path("/x/c.yaml"))), rows
    for name, (default, _) in SITE_DEFAULTS.items():
        shown = f"`{default}`" if isinstance(default, str) else str(default)
        assert rows[name] == shown.replace("``", '`""`'), name
