"""register() pauses cyclic garbage collection while it builds DAGs, and always restores it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoexp.campaign.dags import factory


@pytest.fixture
def gc_state() -> Iterator[None]:
    was = gc.isenabled()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_collection_is_off_while_building_and_back_on_after(
    gc_state: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[bool] = []

    # Stand-ins for planning and building only record the collector state; the real build is in
    # tests/dags.
    def fake(*_: Any, **__: Any) -> list[Any]:
        seen.append(gc.isenabled())
        return []

    monkeypatch.setattr(factory.PlannedConfig, "load", fake)
    monkeypatch.setattr(factory, "build_dags", fake)
    monkeypatch.setattr(factory, "_campaign_dags", fake)
    gc.enable()
    factory.register({}, [tmp_path / "a.yaml"])
    assert seen == [False, False, False]
    assert gc.isenabled()


def test_a_broken_config_restores_collection_and_becomes_an_import_error(
    gc_state: None, tmp_path: Path
) -> None:
    gc.enable()
    namespace: dict[str, Any] = {}
    assert factory.register(namespace, [tmp_path / "missing.yaml"]) == []
    assert gc.isenabled()
    assert list(namespace) == ["broken_missing"]


def test_collection_left_off_when_it_was_off(gc_state: None, tmp_path: Path) -> None:
    gc.disable()
    factory.register({}, [tmp_path / "missing.yaml"])
    assert not gc.isenabled()
