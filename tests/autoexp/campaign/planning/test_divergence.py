"""The divergence patterns against real-looking Megatron-LM log lines: what must stop a training, and
what must not (a healthy line, fp16's skipped iterations, a NaN the rerun state machine re-checks)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from slurm_operator.model.ledger import Attempt
from slurm_operator.policy.fatal import FatalRules, FatalScan, parse_rules
from slurm_operator.policy.resubmission import match_fatal

from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.divergence import (
    DEAD_MODEL_INTERVALS,
    DIVERGED,
    FATAL_PATTERNS,
    dead_model_rule,
    dead_model_rule_of,
    fatal_patterns_of,
    first_repeated_match,
)
from autoexp.campaign.planning.plan import plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings
from autoexp.campaign.planning.training_log import ITERATION_PROGRESS
from tests.autoexp.campaign.planning.jobs import campaign

RULES = tuple(FatalRules(name, patterns) for name, patterns in FATAL_PATTERNS.items())
LOGS = Path(__file__).parent / "data" / "training_logs"
ROOT = Path(__file__).resolve().parents[4]


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
    assert [phase.train.fatal_patterns for phase in dag.phases] == [
        fatal_patterns_of(phase.train.params) for phase in dag.experiment.phases
    ]


@pytest.mark.parametrize("cache", ["miss", "hit"])
def test_the_demos_trainings_stop_a_dead_model(
    cache: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config/demo.yaml's VOCAB_SIZE 384: each training's DIVERGED rule ends with the dead model's,
    cooldowns included, whether the plans come from the config or from the config cache (the DAG
    processor's usual path, which keeps only the variables the factory reads)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    for _ in range(2 if cache == "hit" else 1):
        plans, settings = load_plans(ROOT / "config" / "demo.yaml")
    dag = plan_dag(plans[0], settings)
    dead = {"pattern": dead_model_rule(384).pattern, "repeats": DEAD_MODEL_INTERVALS}
    assert len(dag.phases) > 1
    assert [phase.train.fatal_patterns[DIVERGED][-1] for phase in dag.phases] == [dead] * len(dag.phases)


# ---- a dead model -----------------------------------------------------------------------------
DEAD_LOG = (LOGS / "dead_model_lr1e3.log").read_text()  # our CPU trainer, seed shape, LR 1e3, demo vocab


def _iteration(line: str) -> int:
    found = re.search(ITERATION_PROGRESS, line)
    assert found is not None, line
    return int(found.group(1))


def test_a_real_dead_model_is_diverged_after_m_flat_intervals() -> None:
    """LR 1e3: loss 2.8e6, then 5.950642 (= ln 384) with grad norm 0.000 from iteration 5 on; at
    log-interval 1 the rule's 5th flat line is iteration 9, before the NaN at iteration 12."""
    rule = dead_model_rule(384)
    found = first_repeated_match(rule, DEAD_LOG)
    assert found is not None
    assert _iteration(found[1]) == 9
    assert rule.repeat == DEAD_MODEL_INTERVALS == 5
    # one interval fewer than the log's plateau: still one match; six flat lines are not seven
    assert first_repeated_match(replace(rule, repeat=6), DEAD_LOG) is not None
    assert first_repeated_match(replace(rule, repeat=7), DEAD_LOG) is None


def test_a_healthy_start_at_the_uniform_loss_is_not_dead() -> None:
    """Iterations 1-2 of the real run print 5.95 too (a fresh model guesses uniformly), with a gradient."""
    start = "\n".join(DEAD_LOG.splitlines()[2:4] * 5)
    assert "5.94" in start
    assert first_repeated_match(dead_model_rule(384), start) is None


def _line(loss: str, grad: str = "0.000", iteration: int = 37) -> str:
    return (
        HEALTHY.replace("lm loss: 7.123456E+00", f"lm loss: {loss}")
        .replace("grad norm: 1.234", f"grad norm: {grad}")
        .replace("iteration       37/", f"iteration {iteration:8d}/")
    )


@pytest.mark.parametrize(
    ("vocab", "tp", "loss", "dead"),
    [
        (50304, 1, "1.082580E+01", True),  # the seed: ln 50304 = 10.8258
        (50304, 1, "1.085000E+01", False),  # 0.024 above
        (320, 1, "5.950642E+00", True),  # padded to 384
        (320, 2, "6.238325E+00", True),  # padded to 512 (128 x TP 2)
        (320, 1, "5.768321E+00", False),  # ln 320: the unpadded size is not what a dead model prints
        (384, 1, "NAN", False),  # the NaN rule's
    ],
)
def test_the_uniform_level_follows_the_padded_vocabulary(vocab: int, tp: int, loss: str, dead: bool) -> None:
    rule = dead_model_rule(vocab, tensor_parallel=tp, intervals=3)
    text = "\n".join(_line(loss, iteration=i) for i in range(3))
    assert (first_repeated_match(rule, text) is not None) is dead


def test_a_gradient_or_another_iteration_between_resets_the_count() -> None:
    rule = dead_model_rule(384, intervals=3)
    flat, alive = _line("5.950642E+00"), _line("5.950642E+00", grad="0.013")
    assert first_repeated_match(rule, "\n".join([flat, flat, alive, flat, flat])) is None
    saved = "  successfully saved checkpoint from iteration      40 to /ckpt [ t 0.20s ]"
    assert first_repeated_match(rule, "\n".join([flat, flat, saved, flat])) == (4, flat.strip())


def test_the_rule_of_a_job_reads_its_vocab_size_and_tp() -> None:
    rule = dead_model_rule_of({"VOCAB_SIZE": 320, "TP": 2})
    assert rule == dead_model_rule(320, tensor_parallel=2)
    assert dead_model_rule_of({"TP": 1}) is None
    assert dead_model_rule_of({"VOCAB_SIZE": "{VOCAB}"}) is None
    with pytest.raises(ValueError, match="vocab_size 1 and intervals 5"):
        dead_model_rule(1)


def test_a_trainings_patterns_add_the_dead_model_rule_when_its_vocabulary_is_known() -> None:
    assert fatal_patterns_of({"VOCAB_SIZE": 384}) == {
        DIVERGED: [*FATAL_PATTERNS[DIVERGED], {"pattern": dead_model_rule(384).pattern, "repeats": 5}]
    }
    assert fatal_patterns_of({}) == {DIVERGED: list(FATAL_PATTERNS[DIVERGED])}


def test_the_operators_live_scan_stops_the_real_dead_model_at_its_5th_flat_line() -> None:
    """The Slurm plugin's FatalScan over the relayed log, one line per read as the trigger may see
    it, with the training's patterns and progress pattern: iteration 9, as the pure rule says."""
    scan = FatalScan(parse_rules(fatal_patterns_of({"VOCAB_SIZE": 384})), ITERATION_PROGRESS)
    hits = [hit for line in DEAD_LOG.splitlines(keepends=True) if (hit := scan.feed(line))]
    assert hits
    assert hits[0][0] == DIVERGED
    assert _iteration(hits[0][1]) == 9
