"""AutoExperiment's expansion rules, one test each, with AutoExperiment's behaviour as the expected value."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from autoexp.config import ConfigError, Job, expand, load_config, render
from tests.autoexp.config.conftest import WriteConfig

Jobs = Callable[..., list[Job]]


def test_plain_list_is_an_axis_and_first_key_varies_slowest(jobs_of: Jobs) -> None:
    jobs = jobs_of('name: "{A}-{B}"\nA: [1, 2]\nB: [x, y, z]\n')
    assert [j.name for j in jobs] == ["1-x", "1-y", "1-z", "2-x", "2-y", "2-z"]


def test_labelled_list_is_a_union_of_unequal_branches(jobs_of: Jobs) -> None:
    jobs = jobs_of('name: "{P}-{K}"\nP:\n  - one: {K: [a, b, c]}\n  - two: {K: d}\n')
    assert [j.name for j in jobs] == ["one-a", "one-b", "one-c", "two-d"]


def test_dict_is_a_cartesian_product(jobs_of: Jobs) -> None:
    jobs = jobs_of('name: "{X}{Y}"\nD:\n  X: [1, 2]\n  Y: [3, 4]\n')
    assert [j.name for j in jobs] == ["13", "14", "23", "24"]
    # A plain dict only namespaces visually: its key takes the name of its last sub-key.
    assert jobs[0].params["D"] == "Y"


def test_flat_namespace_label_becomes_parent_value_and_pollutes(jobs_of: Jobs) -> None:
    (job,) = jobs_of('name: "{EXPERIMENTS}"\nEXPERIMENTS:\n  - 10M: {MODEL: m, LAYERS: 5}\n')
    assert job.params["EXPERIMENTS"] == "10M"
    assert job.params["10M"] == "LAYERS"  # the label names the last key inside its item
    assert job.params["MODEL"] == "m"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('X: top\nP:\n  - a: {X: nested}\nname: "{X}"\n', "nested"),  # later in the document wins
        ('P:\n  - a: {X: nested}\nX: top\nname: "{X}"\n', "top"),  # ... whatever the depth
    ],
)
def test_override_by_document_order(jobs_of: Jobs, body: str, expected: str) -> None:
    (job,) = jobs_of(body)
    assert job.params["X"] == expected


def test_forward_references_and_chains_resolve(jobs_of: Jobs) -> None:
    (job,) = jobs_of('name: "{A}"\nA: "{B}-{C}"\nB: "{C}{C}"\nC: "expr({D}*2)"\nD: 21\n')
    assert job.name == "4242-42"
    assert job.params["C"] == 42


def test_format_specs_and_doubled_braces(jobs_of: Jobs) -> None:
    (job,) = jobs_of('name: "lr{LR:.0e}"\nLR: 5e-4\nLIT: "{{{{x}}}}"\nx: 7\nSPEC: "{LR!r}"\n')
    assert job.name == "lr5e-04"
    # `{{` is consumed once per pass and the loop runs on: `{{{{x}}}}` ends as x's value.
    assert job.params["LIT"] == "7"
    assert job.params["SPEC"] == "0.0005"


def test_values_keep_brace_ranges_that_are_not_names(jobs_of: Jobs) -> None:
    (job,) = jobs_of('name: x\nSHARDS: "/data/{0000000..0139827}.tar"\nEMPTY: "{}"\n')
    assert job.params["SHARDS"] == "/data/{0000000..0139827}.tar"
    assert job.params["EMPTY"] == "{}"


def test_expr_only_as_whole_value_and_keeps_type(jobs_of: Jobs) -> None:
    (job,) = jobs_of(
        'name: x\nA: "expr(7 // 2)"\nB: "expr(7 / 2)"\nC: "x_expr(1+1)"\nD: "expr(1+1) "\nE: "expr(1 > 0)"\n'
    )
    assert (job.params["A"], type(job.params["A"])) == (3, int)
    assert (job.params["B"], type(job.params["B"])) == (3.5, float)
    assert job.params["C"] == "x_expr(1+1)"
    assert job.params["D"] == "expr(1+1) "
    assert job.params["E"] is True


def test_numbers_substitute_with_python_str(jobs_of: Jobs) -> None:
    (job,) = jobs_of('name: "{A}_{B}_{C}_{D}"\nA: 1e-5\nB: "expr(1/30)"\nC: true\nD: 0.0001\n')
    assert job.name == "1e-05_0.03333333333333333_True_0.0001"


def test_special_keys_and_defaults(jobs_of: Jobs) -> None:
    (job,) = jobs_of("name: x\ntermination_str: done\nstart_condition_cmd: echo 1\n")
    assert job.check_interval_secs == 900
    assert job.termination_str == "done"
    assert job.start_condition_cmd == "echo 1"
    assert job.termination_cmd == ""
    assert job.cmd == "sbatch s/x.sbatch"


def test_empty_mapping_contributes_nothing(jobs_of: Jobs) -> None:
    (job,) = jobs_of("name: x\nEMPTY: {}\n")
    assert "EMPTY" not in job.params


SCALARS = """\
A: 1e-2
B: 2_000_000_000
C: 5e-4
D: 1.0
E: yes
F: 0x10
G: 2024-01-01
H: '007'
I: 1_000.5
J: .5
K: 1:30
L: ~x
"""


def test_scalars_load_exactly_as_omegaconf(write_config: WriteConfig) -> None:
    path = write_config("name: n\n" + SCALARS, head=True)
    (job,) = expand(load_config(path))
    expected = OmegaConf.to_container(OmegaConf.load(path))
    assert isinstance(expected, dict)
    for key in "ABCDEFGHIJKL":
        assert (job.params[key], type(job.params[key])) == (expected[key], type(expected[key])), key
    assert job.params["A"] == 0.01
    assert job.params["B"] == 2_000_000_000


def test_omegaconf_interpolation_is_resolved_first(
    write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOEXP_TEST_HOME", "/home/me")
    path = write_config(
        'name: x\nLOGS: /logs\nA: "${LOGS}/run"\nB: "${oc.env:AUTOEXP_TEST_HOME}"\n'
        'N: 3\nM: "${N}"\nE: "\\\\${LOGS}"\n',
        head=True,
    )
    (job,) = expand(load_config(path))
    assert job.params["A"] == "/logs/run"
    assert job.params["B"] == "/home/me"
    assert job.params["M"] == 3  # a whole-value interpolation keeps the referenced node's type
    # `\${LOGS}` escapes OmegaConf, which leaves "${LOGS}"; AutoExperiment's {VAR} step then fills {LOGS}.
    assert job.params["E"] == "$/logs"


def test_airflow_section_is_removed_and_kept_raw(write_config: WriteConfig) -> None:
    path = write_config("name: x\nairflow:\n  schedule: null\n  default_args:\n    retries: 2\n", head=True)
    config = load_config(path)
    (job,) = expand(config)
    assert "airflow" not in job.params
    assert "schedule" not in job.params
    assert config.airflow == {"schedule": None, "default_args": {"retries": 2}}
    assert config.airflow_line("default_args.retries") == 9
    assert str(config.airflow_error("default_args.retries", "must be >= 0")) == (
        "config.yaml:9: airflow.default_args.retries: must be >= 0"
    )


def test_template_path_resolves_against_config_folder(write_config: WriteConfig, tmp_path: Path) -> None:
    path = write_config("name: x\n", head=True)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (job,) = expand(load_config(path))
    assert job.template == (tmp_path / "t.sbatch").resolve()
    assert render(job) == "#SBATCH --job-name=x\n"


def test_render_inserts_values_verbatim(write_config: WriteConfig) -> None:
    path = write_config(
        'name: x\nSHARDS: "/d/{0000..0139}.tar"\n',
        template="#SBATCH --job-name={name}\nDATA={SHARDS}\nfor f in ${{A[@]}}; do :; done\n",
        head=True,
    )
    (job,) = expand(load_config(path))
    assert render(job) == "#SBATCH --job-name=x\nDATA=/d/{0000..0139}.tar\nfor f in ${A[@]}; do :; done\n"


def test_shell_braces_that_are_not_names_survive(jobs_of: Jobs) -> None:
    (job,) = jobs_of("name: x\ntermination_cmd: \"squeue -h | awk '{print $1}' | grep -c x\"\n")
    # str.format fails on `{print $1}`, so AutoExperiment leaves this value exactly as written.
    assert job.termination_cmd == "squeue -h | awk '{print $1}' | grep -c x"


def test_shell_braces_block_other_fields_and_that_is_an_error(write_config: WriteConfig) -> None:
    # AutoExperiment would silently keep `{name}` unsubstituted here; the fix is `{{print $1}}`.
    path = write_config("name: x\ntermination_cmd: \"awk '{print $1}' {name}\"\n", head=True)
    expected = "config.yaml:6: termination_cmd: {name} cannot be formatted: KeyError: 'print $1' (job #1)"
    with pytest.raises(ConfigError, match="^" + re.escape(expected) + "$"):
        expand(load_config(path))


def test_float_check_interval_is_accepted(jobs_of: Jobs) -> None:
    (job,) = jobs_of("name: x\ncheck_interval_secs: 1.5\n")
    assert job.check_interval_secs == 2
    assert job.params["check_interval_secs"] == 1.5


def test_override_reaches_the_airflow_section(write_config: WriteConfig) -> None:
    path = write_config("name: x\nairflow:\n  retries: 1\n", head=True)
    config = load_config(path, ["airflow.retries=3"])
    assert config.airflow == {"retries": 3}
    assert (
        str(config.airflow_error("retries", "too many"))
        == "<-f airflow.retries=3>:1: airflow.retries: too many"
    )


def test_keys_that_are_not_identifiers_are_still_substituted(jobs_of: Jobs) -> None:
    # str.format looks up `my-key` as it is; a chain through exprs must follow it across passes.
    (job,) = jobs_of(
        'name: "{my-key}"\nmy-key: "n{other key}"\nother key: "expr({X} * 2)"\nX: "expr(2 + 1)"\n'
    )
    assert job.name == "n6"
