"""Bad nodes: which nodes a task's next attempt is submitted without (``sbatch --exclude``).

Read from the attempt history (every attempt of every try, so the exclusion holds across
resubmissions, Airflow retries and clears), from the node lists sacct reported in the batched
state query (``Attempt.node_list``, a hostlist expression):

- a single-node job that ended NODE_FAIL or BOOT_FAIL: its node. For a job on several nodes Slurm
  does not say which one failed (it drains that node itself, so it is not allocated again), and
  excluding all of them would shrink a partition for one fault; such a node is caught by
- a node on which two attempts failed (FAILED, NODE_FAIL, BOOT_FAIL, or cancelled as hung): a node
  that breaks jobs again and again, as a bad GPU or NIC does.

At most ``cap`` nodes are excluded, the most recently found first kept (an old one is likelier
repaired): a small partition is never excluded away by a run of failures, and a job that needs
k of a partition's N nodes keeps at least N - cap candidates (set ``cap`` <= N - k).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from slurm_operator.model.ledger import Attempt
from slurm_operator.model.states import SlurmState
from slurm_operator.remote import hostlist

NODE_FAULTS = frozenset({SlurmState.NODE_FAIL, SlurmState.BOOT_FAIL})
FAILED_ENDS = NODE_FAULTS | {SlurmState.FAILED}


def _failed(attempt: Attempt) -> bool:
    return attempt.state in FAILED_ENDS or attempt.hung is not None


def bad_nodes(attempts: Sequence[Attempt], cap: int) -> dict[str, str]:
    """Node -> why it is excluded, at most ``cap`` of them (the latest found), in the order found."""
    found: dict[str, str] = {}
    failures: Counter[str] = Counter()
    for attempt in attempts:
        nodes = hostlist.expand(attempt.node_list or "")
        if not nodes:
            continue
        if attempt.state in NODE_FAULTS and len(nodes) == 1:
            found.pop(nodes[0], None)  # (found again: now the latest)
            found[nodes[0]] = f"job {attempt.job_id} ended {attempt.state.value} on it"
        if _failed(attempt):
            for node in nodes:
                failures[node] += 1
                if failures[node] == 2 and node not in found:
                    found[node] = f"the second failed attempt on it was job {attempt.job_id}"
    if cap <= 0:
        return {}
    return dict(list(found.items())[-cap:])
