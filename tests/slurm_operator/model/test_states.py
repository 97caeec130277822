"""SlurmState parsing and the named state sets."""

from __future__ import annotations

import json

import pytest
from slurm_operator.model.states import (
    ACTIVE_STATES,
    FAILED_STATES,
    RESUBMITTABLE_STATES,
    SUCCEEDED_STATES,
    TERMINAL_STATES,
    SlurmState,
)


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ("COMPLETED", SlurmState.COMPLETED),
        ("CANCELLED by 0", SlurmState.CANCELLED),
        ("CANCELLED+", SlurmState.CANCELLED),
        ("  running\n", SlurmState.RUNNING),
        ("OUT_OF_MEMORY", SlurmState.OUT_OF_MEMORY),
        ("PD", SlurmState.PENDING),
        ("CG", SlurmState.COMPLETING),
        ("TO", SlurmState.TIMEOUT),
        ("", SlurmState.UNKNOWN),
        ("EXPLODED", SlurmState.UNKNOWN),
        ("COMPLETEDISH", SlurmState.UNKNOWN),
    ],
)
def test_parse(raw: str, state: SlurmState) -> None:
    assert SlurmState.parse(raw) is state


def test_sets_partition_every_known_state() -> None:
    known = set(SlurmState) - {SlurmState.UNKNOWN}
    assert known == ACTIVE_STATES | TERMINAL_STATES
    assert not ACTIVE_STATES & TERMINAL_STATES
    assert SUCCEEDED_STATES | FAILED_STATES == TERMINAL_STATES
    assert not SUCCEEDED_STATES & FAILED_STATES


def test_unknown_is_never_success_nor_finished() -> None:
    assert SlurmState.UNKNOWN not in SUCCEEDED_STATES | TERMINAL_STATES | ACTIVE_STATES
    assert not SlurmState.UNKNOWN.is_terminal


def test_named_sets() -> None:
    assert {SlurmState.COMPLETED} == SUCCEEDED_STATES
    assert {
        SlurmState.TIMEOUT,
        SlurmState.PREEMPTED,
        SlurmState.NODE_FAIL,
        SlurmState.BOOT_FAIL,
    } == RESUBMITTABLE_STATES
    assert RESUBMITTABLE_STATES <= FAILED_STATES
    assert SlurmState.OUT_OF_MEMORY in FAILED_STATES - RESUBMITTABLE_STATES
    for state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"):
        assert SlurmState(state).is_active
    assert SlurmState.COMPLETED == "COMPLETED"  # a str enum: compares and serialises as its name


def test_a_state_reads_as_its_slurm_spelling() -> None:
    """str(), format() and JSON give the bare value on every Python (StrEnum's behaviour, 3.11+)."""
    state = SlurmState.OUT_OF_MEMORY
    assert (str(state), f"{state}", f"[{state:>14}]") == (
        "OUT_OF_MEMORY",
        "OUT_OF_MEMORY",
        "[ OUT_OF_MEMORY]",
    )
    assert json.dumps({"state": state}) == '{"state": "OUT_OF_MEMORY"}'
    assert state == "OUT_OF_MEMORY"
    assert isinstance(state, str)
