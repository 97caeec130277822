"""What each training attempt did and cost, from its sacct record and its log's Megatron iteration lines.

The fixture: one 4-GPU training, 131,072 tokens per iteration (GLOBAL_BATCH_SIZE 64 x SEQ_LENGTH 2048),
three attempts: job 39 fails before its first iteration; job 40 starts iterating 120 s after its start,
does 10..1000 at 0.3 it/s and hits its time limit (the save at 1000 lost: the last good one is 800);
job 41 resumes from 800, starts iterating after 180 s (810) and finishes 1200 at 0.3 it/s.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.report import attempts as per_attempt
from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.report import campaign_report_render as render
from tests.autoexp.campaign.report.test_campaign_report import REPORTS, ROOT, SPECS

TOKENS_PER_ITER = 64 * 2048

# sacct -X -D -P -n -o JobID,JobName,State,ExitCode,Elapsed,Start,End,NodeList,AllocTRES,Reason
SACCT = """\
39|g_pt|FAILED|1:0|00:05:00|2026-12-01T09:50:00|2026-12-01T09:55:00|g1|cpu=16,gres/gpu=4,node=1|None
40|g_pt|TIMEOUT|0:0|01:00:00|2026-12-01T10:00:00|2026-12-01T11:00:00|g1|cpu=16,gres/gpu=4,node=1|None
41|g_pt|COMPLETED|0:0|00:25:00|2026-12-01T11:00:00|2026-12-01T11:25:00|g2|cpu=16,gres/gpu=4,node=1|None
"""


def megatron(stamp: str, iteration: int, loss: float = 3.2) -> str:
    """Megatron-LM's training_log line (as our CPU trainer prints it too)."""
    return (
        f" [2026-12-01 {stamp}] iteration {iteration:8d}/{1200:8d} | consumed samples: {iteration * 64:12d}"
        f" | elapsed time per iteration (ms): 3333.3 | learning rate: 3.000000E-04 | global batch size:"
        f"    64 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: 0.512 | number of skipped"
        f" iterations:   0 | number of nan iterations:   0 |"
    )


LOGS = {
    "39": "using world size: 4\nTraceback (most recent call last):\nRuntimeError: NCCL error\n",
    "40": "\n".join(
        [
            "using world size: 4, data-parallel size: 4",
            megatron("10:02:00", 10, 9.8),
            megatron("10:02:30", 20, 9.1),
            " validation loss at iteration 500 | lm loss value: 4.000000E+00 |",
            megatron("10:57:00", 1000),
            "slurmstepd: error: *** JOB 40 ON g1 CANCELLED AT 2026-12-01T11:00:00 DUE TO TIME LIMIT ***",
        ]
    ),
    "41": "\n".join(
        [
            " successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 800",
            megatron("11:03:00", 810),
            megatron("11:24:40", 1200, 2.9),
        ]
    ),
}


@pytest.fixture
def rows() -> list[dict]:  # type: ignore[type-arg]
    progress = {job: per_attempt.log_progress(text) for job, text in LOGS.items()}
    return per_attempt.training_attempts(parse_sacct(SACCT), progress, TOKENS_PER_ITER)


def test_iteration_lines_of_a_megatron_log() -> None:
    # the validation line (no "/ total") is not progress; the highest iteration is the end
    assert per_attempt.log_progress(LOGS["40"]) == per_attempt.LogProgress(
        10, 1000, "2026-12-01 10:02:00", "2026-12-01 10:57:00"
    )
    assert per_attempt.log_progress(LOGS["39"]) is None
    # a head and a tail joined (the task reads both of a long log)
    assert per_attempt.log_progress(megatron("10:02:00", 10) + "\n" + megatron("10:03:00", 30)) == (
        per_attempt.LogProgress(10, 30, "2026-12-01 10:02:00", "2026-12-01 10:03:00")
    )


def test_start_up_iterations_tokens_and_pace_per_attempt(rows: list[dict]) -> None:  # type: ignore[type-arg]
    assert [r["attempt"] for r in rows] == [1, 2, 3]
    failed, timed_out, resumed = rows
    assert (failed["start_up_s"], failed["iterations"], failed["tokens"]) == (None, 0, 0)
    assert failed["why_ended"] == "FAILED (exit 1), no iteration reported"
    # 10:00:00 -> 10:02:00; 1000 - 10 = 990 iterations in 3,300 s: 0.3 it/s x 131,072 tokens
    assert timed_out["start_up_s"] == 120.0
    assert (timed_out["iterations"], timed_out["tokens"]) == (990, 990 * TOKENS_PER_ITER)
    assert timed_out["tokens_per_s"] == pytest.approx(39321.6)
    assert timed_out["tokens_per_gpu_s"] == pytest.approx(9830.4)
    assert timed_out["why_ended"] == "TIMEOUT"
    # 11:00:00 -> 11:03:00; 810..1200 = 390 iterations in 1,300 s: 0.3 it/s again
    assert resumed["start_up_s"] == 180.0
    assert (resumed["progress_at_start"], resumed["progress_at_end"]) == (810, 1200)
    assert resumed["tokens_per_s"] == pytest.approx(39321.6)


def test_time_lost_by_cause(rows: list[dict]) -> None:  # type: ignore[type-arg]
    failed, timed_out, resumed = rows
    # job 41 computed 810..1000 again (job 40 had reached 1000): 190 iterations at 0.3 it/s
    assert (timed_out["recomputed_iterations"], resumed["recomputed_iterations"]) == (0, 190)
    assert resumed["recomputed_s"] == pytest.approx(633.333, abs=1e-3)
    assert failed["no_progress_s"] == 300.0
    lost = per_attempt.lost_by_cause([{"attempts": rows}])
    # x 4 GPUs / 3,600: start-up (120 + 180) s, recomputed 633.3 s, the failed start's 300 s
    assert lost == pytest.approx(
        {"start_up": 1200 / 3600, "recomputed": 2533.333 / 3600, "no_progress": 1 / 3}
    )


def test_an_attempt_resumed_above_the_last_one_recomputes_nothing() -> None:
    records = parse_sacct(SACCT)[1:]
    # the time limit's save at 1000 held: job 41 resumed from it
    progress = {
        "40": per_attempt.log_progress(LOGS["40"]),
        "41": per_attempt.LogProgress(1010, 1200, None, None),
    }
    rows = per_attempt.training_attempts(records, progress, None)
    assert [r["recomputed_iterations"] for r in rows] == [0, 0]
    # no stamps: no start-up nor pace; no tokens per iteration: no tokens
    assert (rows[1]["start_up_s"], rows[1]["tokens_per_s"], rows[1]["tokens"]) == (None, None, None)


def test_the_report_carries_them_in_campaign_json_and_text() -> None:
    sacct = SACCT.replace("g_pt", "e2_pt")
    specs = [
        replace(s, phases=tuple(replace(p, tokens_per_iter=TOKENS_PER_ITER) for p in s.phases)) for s in SPECS
    ]
    specs = [
        replace(s, phases=(replace(s.phases[0], train_log="/runs/%j.out"), *s.phases[1:])) for s in specs
    ]
    records = parse_sacct(sacct)
    assert per_attempt.training_logs(specs, records) == {j: f"/runs/{j}.out" for j in ("39", "40", "41")}
    progress = {job: per_attempt.log_progress(text) for job, text in LOGS.items()}
    campaign, _ = cr.build(
        "demo", specs, REPORTS, records, generated_at="2026-12-01T12:00:00+00:00", progress=progress
    )
    [training] = campaign["training_attempts"]
    assert (training["dag_id"], training["phase"]) == ("e2", "pretrain")
    assert [a["iterations"] for a in training["attempts"]] == [0, 990, 390]
    assert campaign["cost"]["lost_by_cause"]["recomputed"] == pytest.approx(2533.333 / 3600)
    text = per_attempt.attempts_text(campaign["training_attempts"], campaign["cost"]["lost_by_cause"])
    assert (
        text[0]
        == "lost hours measured from the logs: start up 0.333 h, recomputed 0.704 h, no progress 0.333 h"
    )
    assert text[3] == (
        "  attempt 2 job 40: 3600 s, start-up 120 s, iterations 10..1000 (990, 129761280 tokens), "
        "3.932e+04 tok/s (9830/GPU), recomputed 0 it (0 s), ended TIMEOUT"
    )
    # the spec's JSON form keeps tokens per iteration (the report task gets its specs as JSON)
    assert cr.ExperimentSpec.from_dict(specs[0].to_dict()) == specs[0]


def test_the_demo_config_specs_know_tokens_per_iteration() -> None:
    plans, settings = load_plans(ROOT / "config" / "demo.yaml")
    dag_plans = [plan_dag(p, settings) for p in plans]
    params = dag_plans[0].experiment.pretrain.train.params
    [first, *_] = cr.experiment_specs(dag_plans)
    expected = int(params["GLOBAL_BATCH_SIZE"]) * int(params["SEQ_LENGTH"])
    assert {p.tokens_per_iter for p in first.phases} == {expected}


def test_the_report_page_shows_the_attempts_table(tmp_path: Path) -> None:
    records = parse_sacct(SACCT.replace("g_pt", "e2_pt"))
    progress = {job: per_attempt.log_progress(text) for job, text in LOGS.items()}
    campaign, _ = cr.build(
        "demo", SPECS, REPORTS, records, generated_at="2026-12-01T12:00:00Z", progress=progress
    )
    page = render.index_html(campaign, tmp_path)
    assert "<h2>What each training attempt did</h2><p>hours lost: start up 0.3333, recomputed 0.7037" in page
    assert "<td>TIMEOUT</td>" in page
    assert "<td>FAILED (exit 1), no iteration reported</td>" in page


def test_a_restart_loop_is_lost_whole_and_says_where_it_stuck() -> None:
    # the restart loop: iteration 37 printed every 3 s until the 3-minute limit, twice
    sacct = (
        "50|r_pt|TIMEOUT|0:0|00:03:00|2026-12-01T10:00:00|2026-12-01T10:03:00|n1|cpu=2,node=1|None\n"
        "51|r_pt|TIMEOUT|0:0|00:03:00|2026-12-01T10:03:10|2026-12-01T10:06:10|n1|cpu=2,node=1|None\n"
    )
    loop = "\n".join(megatron(f"10:00:{s:02d}", 37) for s in range(20, 60, 3))
    progress = {"50": per_attempt.log_progress(loop), "51": per_attempt.log_progress(loop)}
    rows = per_attempt.training_attempts(parse_sacct(sacct), progress, TOKENS_PER_ITER)
    assert [r["why_ended"] for r in rows] == ["TIMEOUT, no progress past iteration 37"] * 2
    assert [(r["iterations"], r["tokens_per_s"], r["recomputed_iterations"]) for r in rows] == [
        (0, None, 0)
    ] * 2
    # 180 s x 2 CPUs each, its 20 s start-up inside it (not counted twice)
    assert per_attempt.lost_by_cause([{"attempts": rows}]) == pytest.approx(
        {"start_up": 0.0, "recomputed": 0.0, "no_progress": 2 * 360 / 3600}
    )
