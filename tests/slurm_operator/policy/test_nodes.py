"""Which nodes a resubmission is sent away from (pure: attempts in, nodes out)."""

from __future__ import annotations

from slurm_operator.model.ledger import Attempt
from slurm_operator.model.states import SlurmState
from slurm_operator.policy.nodes import bad_nodes


def _a(job: int, state: SlurmState, nodes: str, hung: str | None = None) -> Attempt:
    return Attempt(job, str(job), f"/r/{job}.out", "/s", state=state, node_list=nodes, hung=hung)


def test_a_single_node_job_that_ended_node_fail_excludes_its_node() -> None:
    assert bad_nodes([_a(1, SlurmState.NODE_FAIL, "n3")], cap=4) == {"n3": "job 1 ended NODE_FAIL on it"}
    assert bad_nodes([_a(1, SlurmState.BOOT_FAIL, "n3")], cap=4) == {"n3": "job 1 ended BOOT_FAIL on it"}


def test_one_node_fault_of_a_multi_node_job_excludes_none_of_its_nodes() -> None:
    """Slurm does not say which of them failed (and drains that one itself)."""
    assert bad_nodes([_a(1, SlurmState.NODE_FAIL, "n[1-4]")], cap=4) == {}


def test_a_node_on_which_two_attempts_failed_is_excluded() -> None:
    attempts = [
        _a(1, SlurmState.FAILED, "n[1-2]"),
        _a(2, SlurmState.TIMEOUT, "n2"),  # a time limit is not a failure
        _a(3, SlurmState.CANCELLED, "n[2-3]", hung="no progress"),  # a hang is
        _a(4, SlurmState.COMPLETED, "n1"),
    ]
    assert bad_nodes(attempts, cap=4) == {"n2": "the second failed attempt on it was job 3"}


def test_the_cap_keeps_the_latest_found_and_zero_turns_it_off() -> None:
    attempts = [_a(i, SlurmState.NODE_FAIL, f"n{i}") for i in range(1, 6)] + [
        _a(6, SlurmState.NODE_FAIL, "n1")
    ]
    assert list(bad_nodes(attempts, cap=3)) == ["n4", "n5", "n1"]  # n1 found again: latest
    assert bad_nodes(attempts, cap=0) == {}


def test_attempts_without_a_node_list_are_skipped() -> None:
    assert bad_nodes([_a(1, SlurmState.NODE_FAIL, ""), _a(2, SlurmState.NODE_FAIL, "None assigned")], 4) == {}
