"""Planner: grouping, phases, cooldown branches, expected checkpoints and parse-time checks."""

from __future__ import annotations

import dataclasses

import pytest

from autoexp.campaign.planning.plan import (
    PlanError,
    dag_id_for,
    expected_checkpoints,
    plan_campaign,
    slurm_time_secs,
)
from autoexp.campaign.planning.settings import AirflowSettings, Keys
from tests.autoexp.campaign.planning.jobs import FakeJob, campaign

SETTINGS = AirflowSettings()


def test_groups_jobs_into_experiments_in_config_order() -> None:
    plans = plan_campaign(campaign(exps=("b", "a")), SETTINGS)
    assert [p.name for p in plans] == ["b", "a"]
    assert [len(p.jobs) for p in plans] == [6, 6]
    assert plans[0].pretrain.train.name == "b_PRETRAIN_TRAIN"
    assert plans[0].pretrain.convert is not None
    assert [c.branch for c in plans[0].cooldowns] == ["s1", "s2"]
    assert [c.key for c in plans[0].phases] == ["pretrain", "cooldown_s1", "cooldown_s2"]


def test_expected_checkpoints_follow_save_interval_and_last_iteration() -> None:
    plan = plan_campaign(campaign(), SETTINGS)[0]
    assert plan.pretrain.checkpoints == (4, 8, 10)
    # A branch starting at 4 saves at the next multiples of 4 after it, and at its last iteration.
    assert plan.cooldowns[0].checkpoints == (8, 12)
    assert plan.cooldowns[1].checkpoints == (12, 16)
    assert plan.cooldowns[0].start_iter == 4
    assert plan.pretrain.checkpoint_dir == "/logs/a/checkpoints"
    assert plan.pretrain.tokens_per_iter == 16


@pytest.mark.parametrize(
    ("start", "iters", "interval", "expected"),
    [(0, 8, 4, (4, 8)), (0, 3, 4, (3,)), (2000, 3052, 2000, (3052,)), (0, 61036, 2000, None)],
)
def test_expected_checkpoints_table(
    start: int, iters: int, interval: int, expected: tuple[int, ...] | None
) -> None:
    got = expected_checkpoints(start, iters, interval)
    if expected is None:  # config/scaling_exps.yaml's longest pretraining: 30 saves plus the final one
        assert len(got) == 31
        assert got[0] == 2000
        assert got[-2:] == (60000, 61036)
    else:
        assert got == expected


def test_branch_iteration_zero_is_from_scratch_and_reported() -> None:
    plan = plan_campaign(campaign(branches={"s0": (0, 12)}), SETTINGS)[0]
    assert plan.cooldowns[0].from_scratch
    assert plan.cooldowns[0].checkpoints == (4, 8, 12)
    assert plan.notes == (
        "camp.yaml:42: cooldown CD_SCALE=s0 has ITER=0: no pretrain checkpoint to branch from, "
        "it trains from scratch",
    )


def test_branch_iteration_not_multiple_of_save_interval() -> None:
    with pytest.raises(
        PlanError,
        match=r"^camp\.yaml:42: ITER: cooldown CD_SCALE=s1 branches at iteration 6, "
        r"which is not a multiple of SAVE_INTERVAL=4: no checkpoint will exist there "
        r"\(job a_COOLDOWNs1_TRAIN\)$",
    ):
        plan_campaign(campaign(branches={"s1": (6, 12)}), SETTINGS)


def test_branch_iteration_beyond_pretraining() -> None:
    with pytest.raises(PlanError, match=r"branches at iteration 12, beyond pretraining's TRAIN_ITERS=10"):
        plan_campaign(campaign(branches={"s1": (12, 16)}), SETTINGS)


def test_cooldown_must_end_after_its_branch() -> None:
    with pytest.raises(PlanError, match=r"TRAIN_ITERS: cooldown CD_SCALE=s1 ends at iteration 8, not after"):
        plan_campaign(campaign(branches={"s1": (8, 8)}), SETTINGS)


def test_token_budget_must_match_train_iters() -> None:
    jobs = campaign(exps=("a",))
    bad = dataclasses.replace(jobs[0], params={**jobs[0].params, "TOTAL_TOKENS_NUM": 1000})
    with pytest.raises(
        PlanError,
        match=r"TRAIN_ITERS: 10 iterations x 16 tokens = 160 tokens, "
        r"but TOTAL_TOKENS_NUM=1000 needs 63 iterations",
    ):
        plan_campaign([bad, *jobs[1:]], SETTINGS)


def test_string_integers_are_accepted_and_garbage_is_not() -> None:
    jobs = campaign(exps=("a",))
    as_text = dataclasses.replace(jobs[0], params={**jobs[0].params, "TRAIN_ITERS": "10"})
    assert plan_campaign([as_text, *jobs[1:]], SETTINGS)[0].pretrain.train_iters == 10
    garbage = dataclasses.replace(jobs[0], params={**jobs[0].params, "TRAIN_ITERS": "ten"})
    with pytest.raises(PlanError, match=r"TRAIN_ITERS: expected an integer, got 'ten'"):
        plan_campaign([garbage, *jobs[1:]], SETTINGS)


def test_unknown_phase_and_missing_train_job() -> None:
    jobs = campaign(exps=("a",))
    odd = dataclasses.replace(jobs[0], params={**jobs[0].params, "PHASE": "WARMUP"})
    with pytest.raises(PlanError, match=r"PHASE: unknown phase 'WARMUP' \(expected PRETRAIN or COOLDOWN\)"):
        plan_campaign([odd, *jobs[1:]], SETTINGS)
    with pytest.raises(PlanError, match=r"experiment a PRETRAIN: no MODE=TRAIN job"):
        plan_campaign(jobs[1:], SETTINGS)


def test_two_train_jobs_for_one_phase() -> None:
    jobs = campaign(exps=("a",))
    twin = dataclasses.replace(jobs[0], name="a_again")
    with pytest.raises(PlanError, match=r"has 2 jobs for one mode \(a_PRETRAIN_TRAIN, a_again\)"):
        plan_campaign([jobs[0], twin, *jobs[1:]], SETTINGS)


def test_missing_variable_names_the_airflow_keys_section() -> None:
    jobs = [FakeJob("x", {"EXP_NAME": "x", "PHASE": "PRETRAIN"})]
    with pytest.raises(PlanError, match=r"^x: MODE: not defined for this job .*airflow\.keys section\)$"):
        plan_campaign(jobs, SETTINGS)


def test_custom_keys_map_other_names() -> None:
    jobs = [
        FakeJob(j.name, {("STAGE" if k == "PHASE" else k): v for k, v in j.params.items()})
        for j in campaign(exps=("a",), convert=False)
    ]
    plans = plan_campaign(jobs, dataclasses.replace(SETTINGS, keys=Keys(phase="STAGE")))
    assert plans[0].pretrain.convert is None
    assert len(plans[0].cooldowns) == 2


def test_dag_ids_are_sanitised_and_must_stay_unique() -> None:
    assert dag_id_for("p_", "c4 10M/lr0.01") == "p_c4_10M_lr0.01"
    jobs = campaign(exps=("a b", "a/b"))
    with pytest.raises(PlanError, match=r"experiments 'a b' and 'a/b' map to the same DAG id 'a_b'"):
        plan_campaign(jobs, SETTINGS)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(360, 21600), ("15", 900), ("10:30", 630), ("01:00:00", 3600), ("1-02", 93600), ("2-00:00:30", 172830)],
)
def test_slurm_time_limits_in_every_format(value: object, seconds: int) -> None:
    assert slurm_time_secs(value) == seconds


@pytest.mark.parametrize("value", [None, 0, "", "soon", True])
def test_missing_or_odd_time_limits_are_unknown(value: object) -> None:
    assert slurm_time_secs(value) is None
