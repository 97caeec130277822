"""The report task reads the cancel marker of each training whose latest run ended CANCELLED: one the
live loss-spike rule stopped (``fatal: DIVERGED: <line>``, its log's tail shows no NaN) is a
"diverged" cell with that line, out of best, frontier and fit; one cancelled as hung stays "failed".

Uses the shared fake (tests/support/fake_slurm.py) behind a synchronous front: which files one report
reads is pure logic, and a spike a real trainer prints on demand is not what this tests (the rule's
cancel over real SSH is tests/e2e's).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.model import naming
from slurm_operator.model.records import JobRecord, LogChunk, RemoteStat
from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.tasks.campaign_report_task import build_campaign_report
from tests.support.fake_slurm import FakeSlurm

# sacct -X -D -P -n -o JobID,JobName,State,ExitCode,Elapsed,Start,End,NodeList,AllocTRES,Reason
SACCT = """\
11|ok_pt|COMPLETED|0:0|00:30:00|2026-12-01T10:00:00|2026-12-01T10:30:00|n1|cpu=2,node=1|None
21|spike_pt|CANCELLED by 1000|0:15|00:20:00|2026-12-01T10:00:00|2026-12-01T10:20:00|n1|cpu=2,node=1|None
31|hung_pt|CANCELLED by 1000|0:15|00:20:00|2026-12-01T10:00:00|2026-12-01T10:20:00|n1|cpu=2,node=1|None
41|crash_pt|FAILED|1:0|00:05:00|2026-12-01T10:00:00|2026-12-01T10:05:00|n1|cpu=2,node=1|None
"""
SPIKE = " [2026-12-01 10:19:40] iteration      370/    1000 | lm loss: 9.512000E+00 | grad norm: 41.2 |"


def _line(iteration: int, loss: float) -> str:
    return (
        f" [2026-12-01 10:19:00] iteration {iteration:8d}/{1000:8d} | lm loss: {loss:E} | grad norm: 1.0 |\n"
    )


def _spec(dag_id: str, params: int) -> cr.ExperimentSpec:
    phase = cr.PhaseSpec(
        "pretrain", (f"{dag_id}_pt",), 1000, f"/runs/{dag_id}/ckpt", f"/runs/{dag_id}/train-%j.out"
    )
    return cr.ExperimentSpec(dag_id, dag_id, {"LR": "0.01"}, params, f"/runs/{dag_id}/report.json", (phase,))


class _Hook:
    """The sync hook's verbs the report uses, over the fake's async ones; counts the connections and
    records each read_text."""

    opened = 0

    def __init__(self, fake: FakeSlurm, records: list[JobRecord]) -> None:
        self.fake, self.records, self.texts_read = fake, records, list[str]()

    def __call__(self, _conn_id: str) -> _Hook:
        _Hook.opened += 1
        return self

    def __enter__(self) -> _Hook:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def accounting(self, names: list[str], since: str) -> list[JobRecord]:
        return [r for r in self.records if r.name in names]

    def read_text(self, path: str) -> str:
        self.texts_read.append(path)
        return asyncio.run(self.fake.read_text(path))

    def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        return asyncio.run(self.fake.read_log(path, offset, max_bytes))

    def stat(self, path: str) -> RemoteStat:
        return asyncio.run(self.fake.stat(path))

    def list_dir(self, path: str) -> list[str]:
        return asyncio.run(self.fake.list_dir(path))


def test_a_spike_stopped_training_is_diverged_with_its_markers_line_and_out_of_best_and_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = [_spec("ok", 10), _spec("spike", 40), _spec("hung", 40), _spec("crash", 40)]
    fake = FakeSlurm()
    for s, loss in (("ok", 4.0), ("spike", 2.5), ("hung", 2.4), ("crash", 2.3)):
        # every one's report has a last checkpoint with a loss that would win its (N, D) if it counted
        fake.files[f"/runs/{s}/report.json"] = json.dumps(
            [{"phase": "pretrain", "iteration": 10, "tokens": 1000, "train_loss": loss, "score": None}]
        )
    calm = "".join(_line(i, 2.5) for i in range(300, 370, 10))  # no NaN, no dead model: the tail says nothing
    for dag_id, job in (("spike", "21"), ("hung", "31"), ("crash", "41")):
        fake.files[f"/runs/{dag_id}/train-{job}.out"] = calm
    fake.files[naming.cancel_marker_path("/runs/spike/train-21.out")] = (
        f"{naming.FATAL_REASON}: DIVERGED: {SPIKE}\n"
    )
    fake.files[naming.cancel_marker_path("/runs/hung/train-31.out")] = (
        f"{naming.HUNG_REASON}: no new log line for 600 s\n"
    )
    hook = _Hook(fake, parse_sacct(SACCT))
    monkeypatch.setattr("slurm_operator.hooks.slurm.SlurmHook", hook)
    monkeypatch.setenv("AUTOEXP_REPORT_ROOT", str(tmp_path))
    _Hook.opened = 0
    context: Any = {"params": {}}

    build_campaign_report(
        stem="c", ssh_conn_id="ssh", since="2026-12-01", specs=[s.to_dict() for s in specs], context=context
    )

    campaign = json.loads((tmp_path / "c" / "campaign.json").read_text())
    cells = {e["dag_id"]: e["cells"]["pretrain"] for e in campaign["experiments"]}
    assert (cells["spike"]["state"], cells["spike"]["diverged_line"]) == ("diverged", SPIKE.strip())
    assert (cells["hung"]["state"], "diverged_line" in cells["hung"]) == ("failed", False)
    assert cells["crash"]["state"] == "failed"
    assert [(b["params"], b["dag_id"]) for b in campaign["best"]] == [(10, "ok")]
    assert [f["dag_id"] for f in campaign["frontier"]] == ["ok"]
    assert campaign["fit"]["missing"].startswith("no fit: 1 points")
    # one connection; besides the reports, one small read per CANCELLED training (none for the FAILED one)
    assert _Hook.opened == 1
    assert [p for p in hook.texts_read if not p.endswith("report.json")] == [
        "/runs/spike/train-21.out.airflow-cancel",
        "/runs/hung/train-31.out.airflow-cancel",
    ]
