"""Which tools tree an autoexp package uses: its own include/ (a wheel), else the checkout's."""

from __future__ import annotations

from pathlib import Path

from autoexp.cluster_tools import TOOLS_SOURCE, tools_source
from autoexp.config.builtins import TOOLS_SOURCE as BUILTIN_SOURCE


def test_a_package_holding_include_uses_it(tmp_path: Path) -> None:
    package = tmp_path / "site-packages" / "autoexp"
    (package / "include").mkdir(parents=True)
    assert tools_source(package) == package / "include"


def test_a_checkout_package_uses_the_repository_include(tmp_path: Path) -> None:
    package = tmp_path / "src" / "autoexp"
    package.mkdir(parents=True)
    assert tools_source(package) == tmp_path / "include"


def test_this_checkout_uses_its_include_and_builtins_names_the_same() -> None:
    checkout = Path(__file__).resolve().parents[2]
    assert checkout / "include" == TOOLS_SOURCE
    assert BUILTIN_SOURCE is TOOLS_SOURCE
