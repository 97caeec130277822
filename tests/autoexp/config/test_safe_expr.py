"""expr(): arithmetic evaluates like Python; whatever could run code or exhaust memory is refused."""

from __future__ import annotations

import time

import pytest

from autoexp.config import ConfigError, expand, load_config
from autoexp.config.safe_expr import ExprError, evaluate
from tests.autoexp.config.conftest import WriteConfig


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("(2000000000 + 2048 * 16 - 1) // (2048 * 16)", 61036),
        ("min(2*(12*(160**2)*5 + 160*50304) // (2048 * 16), 5000)", 585),
        ("int((4 * 16 * 1)/1)", 64),
        ("1e-4 / 0.01", 1e-4 / 0.01),
        ("int((3052 - 305) / 2000) * 2000", 2000),
        ("7 if 3 > 2 else 8", 7),
        ("0 or 5", 5),
        ("1 < 2 < 3", True),
        ("'a' + 'b'", "ab"),
        ("ceil(10 / 3) + floor(2.5) + sqrt(16) + log2(8)", 4 + 2 + 4.0 + 3.0),
        ("round(2.675, 2)", round(2.675, 2)),
        ("max([1, 5, 3])", 5),
        ("2**62", 2**62),
        ("-(-3) % 2", 1),
    ],
)
def test_arithmetic_matches_python(source: str, expected: object) -> None:
    result = evaluate(source)
    assert result == expected
    assert type(result) is type(expected)


ATTACKS = [
    ("__import__('os').system('touch /tmp/pwned')", r"call of '__import__\('os'\)\.system' is not allowed"),
    ("open('/etc/passwd').read()", r"call of 'open\('/etc/passwd'\)\.read' is not allowed"),
    ("open('/etc/passwd')", r"function 'open' is not allowed"),
    ("eval('1+1')", r"function 'eval' is not allowed"),
    ("exec('import os')", r"function 'exec' is not allowed"),
    ("().__class__.__bases__[0].__subclasses__()", r"call of .* is not allowed"),
    ("(1).__class__", r"attribute access '1 ?\.__class__' is not allowed"),
    ("[x for x in range(10)]", r"'\[x for x in range\(10\)\]' \(ListComp\) is not allowed"),
    ("(lambda: 1)()", r"call of 'lambda ?: 1' is not allowed"),  # Python 3.10 unparses 'lambda : 1'
    ("globals()", r"function 'globals' is not allowed"),
    ("start", r"name 'start' is not allowed"),  # AutoExperiment's eval even saw its own locals
    ("10**10**10", r"too large"),
    ("2**100000", r"too large"),
    ("'x' * 10**9", r"repetition builds a sequence longer than 10000"),
    ("1 << 10**9", r"shift is too large"),
    ("'%0999999999d' % 1", r"%-formatting of strings is not allowed"),
    ("f'{1}'", r"\(JoinedStr\) is not allowed"),
    ("(x := 5)", r"\(NamedExpr\) is not allowed"),
    ("pow(10, 10**8)", r"too large"),
    ("-" * 100_000 + "1", r"expression longer than 10000 characters"),
    ("max(" + ",".join(["1"] * 2500) + ")", r"more than 2000 parts"),
    ("(" * 300 + "1" + ")" * 300, r"invalid syntax: too many nested parentheses"),
    ("exp(100000)", r"OverflowError"),
]


@pytest.mark.parametrize(("source", "pattern"), ATTACKS, ids=[a[0][:30] for a in ATTACKS])
def test_attacks_are_refused_quickly(source: str, pattern: str) -> None:
    started = time.perf_counter()
    with pytest.raises(ExprError, match=pattern):
        evaluate(source)
    assert time.perf_counter() - started < 1.0


def test_attack_in_config_names_the_key_and_runs_nothing(write_config: WriteConfig) -> None:
    marker = write_config("name: x\n", head=True).parent / "pwned"
    path = write_config(f"name: x\nA: \"expr(__import__('os').system('touch {marker}'))\"\n", head=True)
    with pytest.raises(ConfigError, match=r"^config\.yaml:6: A: expr\(__import__\('os'\).*refused: call of"):
        expand(load_config(path))
    assert not marker.exists()


def test_format_width_attack_is_refused(write_config: WriteConfig) -> None:
    # `{{X:>999999999}}` only becomes a field on the second pass; it must be refused there too.
    path = write_config('name: x\nX: 1\nA: "{{X:>999999999}}"\n', head=True)
    with pytest.raises(ConfigError, match=r"^config\.yaml:7: A: format spec '>999999999' asks for a width"):
        expand(load_config(path))


def test_result_must_be_scalar() -> None:
    with pytest.raises(ExprError, match="result is a tuple"):
        evaluate("(1, 2)")
