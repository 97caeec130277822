"""Malformed configs: each gives exactly one line `FILE:LINE: key.path: message`, never a traceback."""

from __future__ import annotations

import re

import pytest

from autoexp.config import ConfigError, expand, load_config, render
from tests.autoexp.config.conftest import WriteConfig

# The minimal head (cmd, template, sbatch_script, output_file) takes lines 1-4; bodies start on line 5.
CASES = [
    (
        "name: x\nA: null\n",
        'config.yaml:6: A: null value; AutoExperiment cannot expand it (write "" for empty)',
    ),
    ('name: "{A}"\nA: [1, null]\n', 'config.yaml:6: A[1]: null list item (write "" for an empty string)'),
    (
        'name: "{A}"\nA: [1, {b: 2}]\n',
        "config.yaml:6: A[0]: list mixes plain values and mappings; use a plain list of values (an axis) "
        "or a list of single-key mappings (labelled branches), not both",
    ),
    (
        'name: "{A}"\nA:\n  - a: 1\n    b: 2\n',
        "config.yaml:7: A[0]: list item has 2 keys (a, b); each item of a labelled list needs exactly "
        "one key "
        "(a missing '-' or too much indentation?)",
    ),
    (
        'name: "{A}"\nA: [[1], [2]]\n',
        "config.yaml:6: A[0]: a list item is itself a list; nested lists are not allowed",
    ),
    ('name: "{A}"\nA: []\n', "config.yaml:6: A: empty list: it makes the whole grid empty (0 jobs)"),
    ("name: x\nA: 1\nA: 2\n", "config.yaml:7: A: duplicate key (first defined at line 6)"),
    ("name: x\nA: [1, 2\n", "config.yaml:7: malformed YAML: expected ',' or ']', but got '<stream end>'"),
    ("name: x\n  bad: indent\n", "config.yaml:6: malformed YAML: mapping values are not allowed here"),
    (
        'name: "{MODLE}"\nMODEL: m\n',
        "config.yaml:5: name: unresolved {MODLE}; did you mean MODULES, MODEL? (job #1)",
    ),
    ('name: x\nA: "x{A}"\n', "config.yaml:6: A: reference cycle A -> A (job #1)"),
    (
        'name: x\nA: "{B}"\nB: "{C}"\nC: "{A}"\n',
        "config.yaml:6: A: reference cycle A -> B -> C -> A (job #1)",
    ),
    (
        "name: x\nA: [1, 2]\n",
        "config.yaml:5: name: 2 jobs are named 'x' (jobs #1 and #2); parameters that differ but are not "
        "in the name: A (1 vs 2)",
    ),
    (
        "name: x\nA: [1, 1]\n",
        "config.yaml:5: name: 2 jobs are named 'x' (jobs #1 and #2); parameters that differ but are not "
        "in the name: none",
    ),
    (
        'name: x\nA: "expr({B}+1)"\nB: m\n',
        "config.yaml:6: A: expr(m+1) refused: name 'm' is not allowed (variables are pasted in as text "
        "with {m}; quote string values)",
    ),
    (
        'name: x\ncheck_interval_secs: "10m"\n',
        "config.yaml:6: check_interval_secs: must be a positive whole number of seconds, got '10m'",
    ),
    (
        'name: x\nB: "{LR.__class__}"\nLR: 1\n',
        "config.yaml:6: B: {LR.__class__} accesses a private attribute; only plain {NAME} fields are allowed",
    ),
    (
        'name: x\nB: "{LR:>99999999}"\nLR: 1\n',
        "config.yaml:6: B: format spec '>99999999' asks for a width over 10000 (job #1)",
    ),
    (
        'name: x\nA: "{{A}}x"\n',
        "config.yaml:6: A: substitution did not settle after 14 passes (still changing: A); "
        "a self-reference through doubled braces? (job #1)",
    ),
    (
        "name: x\nE:\n  - 100: {A: 1}\n",
        'config.yaml:7: E[0].100: key 100 is not a string (int); quote it ("100")',
    ),
    (
        "name: x\nA: !!binary aGVsbG8=\n",
        "config.yaml:6: A: unsupported value of type bytes (tag tag:yaml.org,2002:binary)",
    ),
    ("name: x\nairflow: [1]\n", "config.yaml:6: airflow: the airflow section must be a mapping"),
    ('name: x\nA: "${nope}"\n', "config.yaml:6: A: interpolation failed: Interpolation key 'nope' not found"),
    (
        'name: x\nLR: "0.01"\nB: "{LR:.0e}"\n',
        "config.yaml:7: B: {LR} cannot be formatted: ValueError: Unknown format code 'e' for object "
        "of type 'str' (job #1)",
    ),
    (
        'name: x\nA: "expr(1/0)"\n',
        "config.yaml:6: A: expr(1/0) refused: ZeroDivisionError: division by zero (job #1)",
    ),
    (
        'name: "{A}"\nA:\n  - L1: {X: 1}\n  - 2\n',
        "config.yaml:8: A[1]: list mixes plain values and mappings; use a plain list of values (an axis) "
        "or a list of single-key mappings (labelled branches), not both",
    ),
]


@pytest.mark.parametrize(("body", "expected"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_malformed_config_error(write_config: WriteConfig, body: str, expected: str) -> None:
    path = write_config(body, head=True)
    # Messages may carry a hint after the asserted text (the allowed functions), never a second line.
    with pytest.raises(ConfigError, match="^" + re.escape(expected)) as info:
        expand(load_config(path))
    assert "\n" not in str(info.value)


def test_whole_file_errors(write_config: WriteConfig) -> None:
    path = write_config("- a\n- b\n")
    with pytest.raises(
        ConfigError, match=r"^config\.yaml:1: the top level must be a mapping of keys to values, not a list$"
    ):
        load_config(path)
    path.write_text("")
    with pytest.raises(ConfigError, match=r"^config\.yaml:1: the config is empty$"):
        load_config(path)
    with pytest.raises(
        ConfigError, match=r"^nope\.yaml:1: cannot read the config: No such file or directory$"
    ):
        load_config("nope.yaml")


def test_missing_mandatory_key(write_config: WriteConfig) -> None:
    path = write_config("cmd: x\ntemplate: t.sbatch\nsbatch_script: s\noutput_file: o\nA: 1\n")
    expected = (
        "config.yaml:1: name: missing mandatory key "
        "(AutoExperiment needs name, template, output_file, cmd and sbatch_script)"
    )
    with pytest.raises(ConfigError, match="^" + re.escape(expected) + "$"):
        expand(load_config(path))


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (
            "#SBATCH --job-name={name}\necho {NAEM} {A}\n",
            "t.sbatch:2: unresolved placeholder {NAEM} (job x); write {{ and }} for literal braces",
        ),
        (
            "#SBATCH --job-name={name}\necho ${HOME}\n",
            "t.sbatch:2: unresolved placeholder {HOME} (job x); write {{ and }} for literal braces",
        ),
        (
            "#SBATCH --job-name={name}\necho {}\n",
            "t.sbatch:2: cannot render this line: Format string contains positional fields (job x); "
            "write {{ and }} for literal braces",
        ),
        (
            "#SBATCH --job-name={name}\necho {Ax}\n",
            "t.sbatch:2: unresolved placeholder {Ax} (job x); did you mean A?; "
            "write {{ and }} for literal braces",
        ),
        (
            "#!/bin/bash\necho {name.__class__}\n",
            "t.sbatch:2: {name.__class__} accesses a private attribute; only plain {NAME} fields are allowed",
        ),
    ],
)
def test_template_errors_name_template_line(write_config: WriteConfig, template: str, expected: str) -> None:
    path = write_config("name: x\nA: 1\n", template=template, head=True)
    (job,) = expand(load_config(path))
    with pytest.raises(ConfigError, match="^" + re.escape(expected) + "$"):
        render(job)


def test_missing_template_file(write_config: WriteConfig) -> None:
    path = write_config("name: x\n", head=True)
    (path.parent / "t.sbatch").unlink()
    (job,) = expand(load_config(path))
    with pytest.raises(
        ConfigError,
        match=r"^config\.yaml:2: template: cannot read template .*t\.sbatch: No such file or directory$",
    ):
        render(job)


def test_yaml_alias_bomb_is_refused(write_config: WriteConfig) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    path = write_config("\n".join(levels) + "\n")
    with pytest.raises(
        ConfigError, match=r"^config\.yaml:\d+: a\d\[\d+\]\S*: more than 200000 values after expanding"
    ):
        load_config(path)
