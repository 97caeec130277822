"""doc_md of a campaign DAG: phases, checkpoints, notes, resolved variables and the config hash."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoexp.campaign.planning.plan import ExperimentPlan


def _variables(params: Mapping[str, Any]) -> str:
    rows = [f"| `{k}` | `{str(v).replace('|', '&#124;')[:200]}` |" for k, v in sorted(params.items())]
    return "\n".join(["| variable | value |", "|---|---|", *rows])


def doc_md(plan: ExperimentPlan, config_path: str, digest: str, replaced: list[str]) -> str:
    """Markdown shown on the DAG page."""
    lines = [
        f"# {plan.name}",
        f"Config `{config_path}` (sha256 `{digest}`), {len(plan.jobs)} jobs.",
        "",
        "| phase | branch from | train iters | save interval | checkpoints converted + evaluated |",
        "|---|---|---|---|---|",
    ]
    for p in plan.phases:
        start = "scratch" if p.branch is None or p.from_scratch else f"iter {p.start_iter}"
        its = ", ".join(map(str, p.checkpoints[:12])) + (" ..." if len(p.checkpoints) > 12 else "")
        lines.append(
            f"| {p.key} | {start} | {p.train_iters} | {p.save_interval} | {len(p.checkpoints)}: {its} |"
        )
    if plan.notes or replaced:
        lines += ["", "## Notes", *[f"- {n}" for n in [*plan.notes, *replaced]]]
    lines += ["", "## Resolved variables (pretrain TRAIN job)", _variables(plan.pretrain.train.params)]
    return "\n".join(lines)
