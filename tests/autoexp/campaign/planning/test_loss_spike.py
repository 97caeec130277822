"""`airflow.loss_spike`: off by default; on, every training stops on a loss above k x its running median
for m log intervals (the Slurm operator's ``above_median`` pattern on Megatron-LM's ``lm loss``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from slurm_operator.policy.fatal import FatalScan, parse_rules

from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.divergence import DIVERGED, MEGATRON_LOSS, fatal_patterns_of, loss_spike_rule
from autoexp.campaign.planning.loss_spike import LossSpikeSettings
from autoexp.campaign.planning.settings import SettingsError, parse_settings
from autoexp.campaign.planning.training_log import ITERATION_PROGRESS

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"
HEALTHY = (
    " [2026-12-03 14:41:20] iteration       37/    1200 | consumed samples:         1184 | elapsed time "
    "per iteration (ms): 812.4 | learning rate: 2.999999E-04 | global batch size:    32 | lm loss: "
    "7.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of "
    "nan iterations:   0 |"
)


def _trainings_patterns(monkeypatch: pytest.MonkeyPatch, tmp: Path, *overrides: str) -> list[list[object]]:
    """Each training's DIVERGED patterns in the demo's first DAG, with ``overrides`` (`-f` style)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp))
    plans, settings = load_plans(DEMO, overrides)
    dag = plan_dag(plans[0], settings)
    assert len(dag.phases) > 1  # the pretraining and its cooldowns
    return [list(phase.train.fatal_patterns[DIVERGED]) for phase in dag.phases]


def test_off_by_default_no_training_gets_the_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert parse_settings(None).loss_spike == LossSpikeSettings(factor=0, intervals=3, window=20)
    assert loss_spike_rule(LossSpikeSettings()) is None
    for patterns in _trainings_patterns(monkeypatch, tmp_path):
        assert not any(isinstance(p, dict) and "above_median" in p for p in patterns), patterns


def test_on_every_training_gets_the_rule_with_the_given_k_m_and_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    override = "airflow.loss_spike={factor: 2.5, intervals: 4, window: 8}"
    rule = {"pattern": MEGATRON_LOSS, "above_median": 2.5, "repeats": 4, "window": 8}
    for patterns in _trainings_patterns(monkeypatch, tmp_path, override):
        assert patterns[-1] == rule
        assert patterns[:-1] == fatal_patterns_of({"VOCAB_SIZE": 384})[DIVERGED]  # the others stay
    assert parse_rules({DIVERGED: [rule]})[0].parsed[0].above_median == 2.5  # the plugin takes it


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{factor: 0.5}", "5: airflow.loss_spike.factor: must be 0 (off) or > 1, got 0.5"),
        ("{factor: 1}", "5: airflow.loss_spike.factor: must be 0 (off) or > 1, got 1"),
        ("{factor: -2}", "5: airflow.loss_spike.factor: must be >= 0"),
        ('{factor: "3"}', "5: airflow.loss_spike.factor: expected int or float, got '3'"),
        ("{factor: 3, intervals: 0}", "5: airflow.loss_spike.intervals: must be >= 1"),
        ("{factor: 3, window: 2.5}", "5: airflow.loss_spike.window: expected int, got 2.5"),
        ("{k: 3}", "5: airflow.loss_spike.k: unknown key (known: factor, intervals, window)"),
        ("3", "5: airflow.loss_spike: expected a mapping, got 3"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_file_line_and_key(
    section: str, message: str, tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"# a campaign\nairflow:\n  retries: 1\n\n  loss_spike: {section}\n")
    raw = yaml.safe_load(config.read_text())["airflow"]
    with pytest.raises(SettingsError, match=f"^{re.escape(f'{config}:{message}')}$"):
        parse_settings(raw, config)


@pytest.mark.parametrize(
    ("line", "value"),
    [
        (HEALTHY, "7.123456E+00"),
        (HEALTHY.replace("7.123456E+00", "NAN"), "NAN"),
        ("iteration 120/400 | lm loss: 3.0100 | number of nan iterations: 0 |", "3.0100"),  # the e2e stand-in
        (" validation loss at iteration 1000 | lm loss value: 2.9E+00 | lm loss PPL: 18.1 | ", None),
        ("lm loss: 9.0 | loss scale: 1.0 |", None),  # not an iteration line
    ],
)
def test_the_rule_reads_the_training_loss_of_megatron_s_iteration_line(line: str, value: str | None) -> None:
    found = re.search(MEGATRON_LOSS, line)
    assert (found.group(1) if found else None) == value


def _log(losses: list[float]) -> str:
    return "".join(
        HEALTHY.replace("7.123456E+00", f"{v:.6E}").replace("  37/", f"{i:4d}/") + "\n"
        for i, v in enumerate(losses, 1)
    )


def test_the_operators_live_scan_stops_a_tripled_loss_at_its_m_th_interval_and_not_a_healthy_run() -> None:
    spike = LossSpikeSettings(factor=3, intervals=2, window=5)
    healthy = [3.0 - i * 0.01 + (0.2 if i % 4 == 0 else 0.0) for i in range(40)]  # falling, with bumps

    def scan(losses: list[float]) -> list[tuple[str, str]]:
        live = FatalScan(parse_rules(fatal_patterns_of({}, spike)), ITERATION_PROGRESS)
        return [hit for line in _log(losses).splitlines(keepends=True) if (hit := live.feed(line))]

    assert scan(healthy) == []
    hits = scan([*healthy[:10], 9.5, 2.9, 9.5, 12.0, 15.0])
    assert hits[0][0] == DIVERGED
    assert re.findall(ITERATION_PROGRESS, hits[0][1]) == ["14"]  # the 2nd of two in a row (13, 14)
