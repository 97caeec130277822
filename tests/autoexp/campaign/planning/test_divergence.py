"""The divergence patterns against real-looking Megatron-LM log lines: what must stop a training, and
what must not (a healthy line, fp16's skipped iterations, a NaN the rerun state machine re-checks)."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_operator.model.records import Attempt
from slurm_operator.policy.resubmission import FatalRules, match_fatal

from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.divergence import DIVERGED, FATAL_PATTERNS
from autoexp.campaign.planning.plan import plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings
from tests.autoexp.campaign.planning.jobs import campaign

RULES = tuple(FatalRules(name, patterns) for name, patterns in FATAL_PATTERNS.items())
LOGS = Path(__file__).parent / "data" / "training_logs"


def _match(text: str) -> str | None:
    return match_fatal(RULES, Attempt(1, "1", "/l", ""), text).fatal_line


HEALTHY = (
    " iteration       37/    1200 | consumed samples:         1184 | elapsed time per iteration (ms): 812.4 |"
    " learning rate: 2.999999E-04 | global batch size:    32 | lm loss: 7.123456E+00 | loss scale: 1.0 |"
    " grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
)


@pytest.mark.parametrize(
    "line",
    [
        HEALTHY.replace("lm loss: 7.123456E+00", "lm loss: NAN"),
        HEALTHY.replace("lm loss: 7.123456E+00", "lm loss: INF"),
        HEALTHY.replace("lm loss: 7.123456E+00", "lm loss: -INF"),
        "[2026-12-03 08:14:25] iteration      428/    5000 | consumed samples: 6848 | lm loss: nan | "
        "grad norm: nan |",
        # the e2e stand-in's
        "iteration 120/400 | lm loss: nan | grad norm: nan | number of nan iterations: 1 |",
        " validation loss at iteration 1000 | lm loss value: NAN | lm loss PPL: NAN | ",
        "[rank0]: AssertionError: Rank 0: found NaN in local forward loss calculation. Device: 0, "
        "node: gpu-01",
        "AssertionError: Rank 13: found NaN in local grad norm in backward pass before data-parallel "
        "communication collective. Device: 5, node: node-15-11",
        "[rank3]: RuntimeError: Rank 3, node gpu-07, device 3, iteration 2: Unexpected result nan "
        "(message='found NaN in local forward loss calculation')",
        "RuntimeError: Rank 1 ... Unexpected result inf (message='found Inf in local grad norm for bucket #0 "
        "in backward pass before data-parallel communication collective')",
    ],
)
def test_a_diverged_line_is_fatal(line: str) -> None:
    tail = f"{HEALTHY}\n{line}\nsrun: error: gpu-01: task 0: Exited with exit code 1\n"
    assert _match(tail) == line.strip()


@pytest.mark.parametrize(
    "line",
    [
        HEALTHY,
        # fp16 overflow: skipped and "nan" iterations counted, the loss itself finite
        HEALTHY.replace(
            "skipped iterations:   0 | number of nan iterations:   0",
            "skipped iterations:   2 | number of nan iterations:   2",
        ).replace("loss scale: 1.0", "loss scale: inf"),
        # the rerun state machine's first report: it reruns the step and may call it a hardware fault
        "WARNING:megatron.core.rerun_state_machine:Unexpected result tensor(nan) on rank 0 at iteration #150 "
        "invocation #1 (message='found NaN in local forward loss calculation')",
        "Possible transient error!",
        "  --check-for-nan-in-loss-and-grad ........................ True",
        "saving checkpoint at iteration     400 to /scratch/runs/exp/checkpoints",
    ],
)
def test_a_healthy_or_recoverable_line_is_not(line: str) -> None:
    assert _match(f"{line}\n") is None


def test_the_torchrun_tail_of_a_nan_run_is_diverged_at_its_nan_line() -> None:
    tail = (LOGS / "torchrun_py311.log").read_text()
    matched = match_fatal(RULES, Attempt(1, "1", "/l", ""), tail)
    assert matched.fatal == DIVERGED
    assert (
        matched.fatal_line
        == "iteration 120/400 | lm loss: nan | grad norm: nan | number of nan iterations: 1 |"
    )


def test_every_training_of_a_plan_stops_on_divergence() -> None:
    settings = AirflowSettings()
    dag = plan_dag(plan_campaign(campaign(exps=("a",)), settings)[0], settings)
    assert [phase.train.fatal_patterns for phase in dag.phases] == [FATAL_PATTERNS] * len(dag.phases)
