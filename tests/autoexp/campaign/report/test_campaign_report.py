"""Campaign report, pure: grid states, hours from sacct rows, best LR, frontier, fit, files written."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import pytest
from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.report import campaign_report_render as render
from autoexp.campaign.report.campaign_report_paths import campaign_report_dir

ROOT = Path(__file__).resolve().parents[4]


def spec(dag_id: str, model: str, lr: str, params: int) -> cr.ExperimentSpec:
    return cr.ExperimentSpec(
        dag_id=dag_id,
        experiment=dag_id,
        axes={"MODEL": model, "LR": lr},
        params=params,
        report_json=f"/runs/{dag_id}/report/report.json",
        phases=(
            cr.PhaseSpec("pretrain", (f"{dag_id}_pt", f"{dag_id}_pt_conv_1"), 1000, f"/runs/{dag_id}/ckpt"),
            cr.PhaseSpec("cooldown_c1", (f"{dag_id}_cd",), 2000, f"/runs/{dag_id}/ckpt_cd"),
        ),
    )


SPECS = [spec("e1", "tiny", "0.01", 10), spec("e2", "tiny", "0.001", 10), spec("e3", "small", "0.01", 40)]

# sacct -X -D -P -n -o JobID,JobName,State,ExitCode,Elapsed,Start,End,NodeList,AllocTRES,Reason
SACCT = """\
10|e1_pt|TIMEOUT|0:0|01:00:00|2026-12-01T10:00:00|2026-12-01T11:00:00|n1|cpu=2,mem=1G,node=1|None
11|e1_pt|COMPLETED|0:0|00:30:00|2026-12-01T11:00:00|2026-12-01T11:30:00|n1|cpu=2,mem=1G,node=1|None
12|e1_pt_conv_1|COMPLETED|0:0|00:06:00|2026-12-01T11:31:00|2026-12-01T11:37:00|n1|cpu=1,node=1|None
13|e1_cd|COMPLETED|0:0|00:12:00|2026-12-01T11:40:00|2026-12-01T11:52:00|n1|cpu=1,node=1|None
20|e2_pt|FAILED|1:0|02:00:00|2026-12-01T10:00:00|2026-12-01T12:00:00|n2|billing=8,cpu=8,gres/gpu=4,node=1|None
21|e2_cd|RUNNING|0:0|00:10:00|2026-12-01T12:00:00|Unknown|n2|cpu=1,node=1|None
30|e3_pt|COMPLETED|0:0|00:20:00|2026-12-01T10:00:00|2026-12-01T10:20:00|n3|cpu=4,node=1|None
99|other_job|COMPLETED|0:0|10:00:00|2026-12-01T10:00:00|2026-12-01T20:00:00|n3|cpu=64,node=1|None
"""
REPORTS = {
    "e1": [
        {"phase": "pretrain", "iteration": 5, "tokens": 500, "train_loss": 5.0, "score": 0.2, "t/acc": 0.2},
        {"phase": "pretrain", "iteration": 10, "tokens": 1000, "train_loss": 4.0, "score": 0.3, "t/acc": 0.3},
        {"phase": "cooldown_c1", "iteration": 20, "tokens": 2000, "train_loss": 3.5, "score": None},
    ],
    "e2": [{"phase": "pretrain", "iteration": 10, "tokens": 1000, "train_loss": 4.5, "score": None}],
    "e3": [{"phase": "pretrain", "iteration": 10, "tokens": 1000, "train_loss": 3.0, "score": None}],
}


def local(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.fixture
def built() -> tuple[dict, list[dict]]:  # type: ignore[type-arg]
    # e2's failed pretraining saved its last checkpoint at 11:30: the 30 minutes after it are wasted.
    times = {"/runs/e2/ckpt": [local("2026-12-01T10:30:00"), local("2026-12-01T11:30:00")]}
    return cr.build(
        "demo",
        SPECS,
        REPORTS,
        parse_sacct(SACCT),
        generated_at="2026-12-01T12:10:00+00:00",
        checkpoint_times=times,
    )


def test_grid_states_losses_and_metrics(built: tuple[dict, list[dict]]) -> None:  # type: ignore[type-arg]
    experiments = {e["dag_id"]: e for e in built[0]["experiments"]}
    assert {k: c["state"] for k, c in experiments["e1"]["cells"].items()} == {
        "pretrain": "done",
        "cooldown_c1": "done",
    }
    assert {k: c["state"] for k, c in experiments["e2"]["cells"].items()} == {
        "pretrain": "failed",
        "cooldown_c1": "running",
    }
    # e3 never converted its checkpoint and never started its cooldown.
    assert experiments["e3"]["cells"]["cooldown_c1"]["state"] == "missing"
    last = experiments["e1"]["cells"]["pretrain"]
    assert (last["final_loss"], last["tokens"], last["metrics"]) == (4.0, 1000, {"t/acc": 0.3, "score": 0.3})
    assert experiments["e1"]["axes"] == {"MODEL": "tiny", "LR": "0.01"}


def test_hours_are_elapsed_times_allocation_and_wasted_after_last_checkpoint(
    built: tuple[dict, list[dict]],  # type: ignore[type-arg]
) -> None:
    campaign, attempts = built
    by_job = {a["job_id"]: a for a in attempts}
    assert "99" not in by_job  # not the campaign's
    assert (by_job["10"]["unit"], by_job["10"]["hours"], by_job["10"]["attempt"]) == ("cpu", 2.0, 1)
    assert (by_job["11"]["attempt"], by_job["11"]["wasted_hours"]) == (2, 0.0)
    # A timeout with no checkpoint time known: the whole attempt is wasted.
    assert by_job["10"]["wasted_hours"] == 2.0
    assert (by_job["20"]["unit"], by_job["20"]["hours"], by_job["20"]["wasted_hours"]) == ("gpu", 8.0, 2.0)
    expected_cpu = 2 * 1 + 2 * 0.5 + 0.1 + 0.2 + 1 / 6 + 4 / 3
    assert campaign["gpu_hours"]["total"] == pytest.approx(8.0 + expected_cpu)
    assert campaign["gpu_hours"]["wasted"] == pytest.approx(4.0)
    assert campaign["gpu_hours"]["by_unit"] == pytest.approx({"gpu": 8.0, "cpu": expected_cpu})
    per = {e["dag_id"]: e["gpu_hours"] for e in campaign["experiments"]}
    assert per == pytest.approx({"e1": 3.3, "e2": 8.0 + 1 / 6, "e3": 4 / 3})
    cells = {(e["dag_id"], k): c["gpu_hours"] for e in campaign["experiments"] for k, c in e["cells"].items()}
    assert cells == pytest.approx(
        {
            ("e1", "pretrain"): 3.1,
            ("e1", "cooldown_c1"): 0.2,
            ("e2", "pretrain"): 8.0,
            ("e2", "cooldown_c1"): 1 / 6,
            ("e3", "pretrain"): 4 / 3,
            ("e3", "cooldown_c1"): 0.0,
        }
    )


def test_best_lr_frontier_and_why_there_is_no_fit(built: tuple[dict, list[dict]]) -> None:  # type: ignore[type-arg]
    campaign = built[0]
    best = {(b["params"], b["tokens"]): (b["dag_id"], b["LR"]) for b in campaign["best"]}
    assert best == {(10, 1000): ("e1", "0.01"), (10, 2000): ("e1", "0.01"), (40, 1000): ("e3", "0.01")}
    # e2's failed pretraining (loss 4.5) is no point: its last loss is not its budget's.
    assert [(f["dag_id"], f["phase"], f["compute"]) for f in campaign["frontier"]] == [
        ("e1", "pretrain", 60_000),
        ("e1", "cooldown_c1", 120_000),
        ("e3", "pretrain", 240_000),
    ]
    assert campaign["fit"] == {
        "missing": "no fit: 3 points, 2 model sizes (10, 40), 2 token budgets (1e+03, 2e+03); needs >= 3 of "
        "each and >= 6 points; missing cells (N, D): (40, 2e+03)"
    }


def test_files_are_written_with_inline_plots(built: tuple[dict, list[dict]], tmp_path: Path) -> None:  # type: ignore[type-arg]
    campaign, attempts = built
    files = render.write_files(campaign, attempts, REPORTS, tmp_path)
    names = sorted(p.name for p in files)
    assert names == sorted(
        [
            "grid.csv",
            "gpu_hours.csv",
            "campaign.json",
            "index.html",
            "loss_vs_tokens.png",
            "loss_vs_compute.png",
            "best_lr_vs_size.png",
            "gpu_hours_per_model.png",
        ]
    )
    for p in files:
        assert p.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # no temporary file left behind
    data = json.loads((tmp_path / "campaign.json").read_text())
    assert data["plots"] == [
        "loss_vs_tokens.png",
        "loss_vs_compute.png",
        "best_lr_vs_size.png",
        "gpu_hours_per_model.png",
    ]
    assert set(data["experiments"][0]) >= {"dag_id", "experiment", "axes", "cells", "gpu_hours"}
    page = (tmp_path / "index.html").read_text()
    assert page.count("data:image/png;base64,iVBOR") == 4  # PNGs inlined: the page stands alone
    assert '<td style="background:#fcbba1">failed 4.5</td>' in page
    grid = (tmp_path / "grid.csv").read_text().splitlines()
    assert grid[0].startswith("dag_id,experiment,MODEL,LR,params,gpu_hours,pretrain:state,pretrain:tokens,")
    assert grid[1].startswith("e1,e1,tiny,0.01,10,3.3,done,1000,4.0,0.3,0.3,done,2000,3.5")
    assert render.text_table(campaign["experiments"]).splitlines()[1].split() == [
        "e1", "tiny", "0.01", "done", "4", "done", "3.5", "3.3"
    ]  # fmt: skip


def test_report_dir_rule() -> None:
    assert campaign_report_dir("demo", {"AUTOEXP_REPORT_ROOT": "/r", "AIRFLOW_HOME": "/a"}) == Path("/r/demo")
    assert campaign_report_dir("demo", {"AIRFLOW_HOME": "/a"}) == Path("/a/autoexp-reports/demo")
    assert campaign_report_dir("x", {}) == Path("~/airflow/autoexp-reports/x").expanduser()


def test_specs_of_the_demo_config() -> None:
    plans, settings = load_plans(ROOT / "config" / "demo.yaml")
    specs = cr.experiment_specs([plan_dag(p, settings) for p in plans])
    assert len(specs) == 9
    assert sorted((s.axes["MODEL"], s.axes["LR"]) for s in specs) == sorted(
        (m, lr) for m in ("tiny", "small", "medium") for lr in ("0.002", "0.006", "0.018")
    )
    first = specs[0]
    assert next(p.key for p in first.phases) == "pretrain"
    assert all(p.jobs and p.tokens for p in first.phases)
    assert first.params
    assert first.report_json.endswith("/report/report.json")
    assert cr.ExperimentSpec.from_dict(json.loads(json.dumps(first.to_dict()))) == first


def lr_star(n: float) -> float:
    """The grid's known optimal LR: 0.3 N^-0.25 at every budget."""
    return 0.3 * n**-0.25


def full_grid() -> tuple[list[cr.ExperimentSpec], dict[str, list[dict]], str]:  # type: ignore[type-arg]
    """4 sizes x 3 learning rates (LR*/4, LR*, 2 LR*) x 3 budgets; loss = Chinchilla's law +
    0.02 (ln LR - ln LR*)^2: the best cell per (N, D) lies on the law, each parabola's minimum is LR*."""
    sizes, budgets = (10**7, 10**8, 10**9, 10**10), (10**9, 10**10, 10**11)
    specs, reports, lines = [], {}, []
    for i, n in enumerate(sizes):
        for k, factor in enumerate((0.25, 1.0, 2.0)):
            dag, lr = f"m{i}_lr{k}", lr_star(n) * factor
            phases = tuple(
                cr.PhaseSpec(f"cd_{d:.0e}", (f"{dag}_{j}",), d, f"/c/{dag}") for j, d in enumerate(budgets)
            )
            specs.append(cr.ExperimentSpec(dag, dag, {"MODEL": f"m{i}", "LR": repr(lr)}, n, "/r", phases))
            reports[dag] = [
                {
                    "phase": p.key,
                    "iteration": 1,
                    "tokens": p.tokens,
                    "train_loss": 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28 + 0.02 * math.log(factor) ** 2,
                }
                for p, d in zip(phases, budgets, strict=True)
            ]
            run = "COMPLETED|0:0|00:01:00|2026-12-01T10:00:00|2026-12-01T10:01:00|n|cpu=1|None"
            lines += [f"{100 * i + 10 * k + j}|{dag}_{j}|{run}" for j in range(3)]
    return specs, reports, "\n".join(lines)


def test_a_full_grid_gets_a_fit_a_held_out_check_an_lr_law_and_their_plots(tmp_path: Path) -> None:
    specs, reports, sacct = full_grid()
    campaign, attempts = cr.build(
        "full", specs, reports, parse_sacct(sacct), generated_at="now", budgets=[1e21], bootstrap=10
    )
    fit = campaign["fit"]
    assert fit["values"]["alpha"] == pytest.approx(0.34, abs=0.02)
    assert fit["points"] == 12  # the best cell per (N, D)
    assert set(fit["compute_optimal"]) == {"1e+21"}
    assert campaign["gpu_hours"]["total"] == pytest.approx(36 / 60)
    held = campaign["holdout"]
    assert held["held_out_params"] == 10**10
    assert [r["tokens"] for r in held["points"]] == [10**9, 10**10, 10**11]
    assert held["max_abs_relative_error"] < 1e-3  # noise-free: the law is exact
    lr = campaign["lr_optimum"]
    assert lr["exponent_n"] == pytest.approx(-0.25, abs=1e-6)
    assert lr["exponent_d"] == pytest.approx(0.0, abs=1e-6)
    assert lr["coefficient"] == pytest.approx(0.3, rel=1e-4)
    assert [p["status"] for p in lr["points"]] == ["in sweep"] * 12
    assert "batch_optimum" not in campaign  # the grid does not vary the batch
    text = render.answer_text(campaign).splitlines()
    assert text[0] == "scaling-law fit:"
    assert text[1].startswith("12 points, 10 bootstrap resamples (95% intervals), 6 L-BFGS starts")
    assert text[7].startswith("C = 1e+21 FLOPs: N_opt = ")
    assert text[8].startswith("held-out check: fitted without the largest size (N = 1e+10, 9 points left)")
    assert text[12].startswith("LR*(N, D) = 0.3 * N^-0.250 * D^0.000 (a in [")
    assert (
        text[13] == "  N = 1e+07, D = 1e+09: LR* = 0.00533 no interval (3 values) (swept 0.00133 to 0.0107)"
    )
    files = [p.name for p in render.write_files(campaign, attempts, reports, tmp_path)]
    assert {"fit_residuals.png", "lr_parabolas.png", "lr_law.png"} <= set(files)
    page = (tmp_path / "index.html").read_text()
    assert "alpha" in page
    assert "<h2>Held-out check (fit without the largest model size)</h2><pre>held-out check: fitted" in page
    assert "<h2>Optimal learning rate</h2><pre>LR*(N, D) = 0.3 * N^-0.250" in page
    assert "range across 6 L-BFGS starts" in page


def test_a_grid_of_three_sizes_says_why_there_is_no_held_out_check_and_no_lr_law(
    built: tuple[dict, list[dict]],  # type: ignore[type-arg]
) -> None:
    campaign = built[0]
    assert campaign["holdout"] == {"missing": "2 sizes: too few to hold the largest out; needs >= 4"}
    assert campaign["lr_optimum"]["missing"] == "no LR law: no (N, D) has >= 3 learning rates (at most 1)"
    assert render.answer_text(campaign).splitlines()[1:3] == [
        "held-out check: 2 sizes: too few to hold the largest out; needs >= 4",
        "no LR law: no (N, D) has >= 3 learning rates (at most 1)",
    ]


def test_a_cancelled_hung_run_without_checkpoint_is_wasted_entirely() -> None:
    (record,) = parse_sacct(
        "7|x_train|CANCELLED by 1000|0:15|00:30:00|2026-12-01T10:00:00|2026-12-01T10:30:00|n|"
        "cpu=1,gres/gpu:h100=2|None\n"
    )
    hours = cr.attempt_hours(record, [local("2026-12-01T09:00:00")])  # a checkpoint of an earlier run
    assert (hours["unit"], hours["hours"], hours["wasted_hours"]) == ("gpu", 1.0, 1.0)
