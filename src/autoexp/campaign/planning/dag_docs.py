"""What the UI says about a campaign DAG: its doc_md in plain words and the names of its phase choices."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoexp.campaign.planning import run_layout
from autoexp.campaign.planning.dag_plan import DagPlan
from autoexp.campaign.planning.model_size import param_count
from autoexp.campaign.planning.plan import ExperimentPlan, PhasePlan

_UNITS = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))
# Checkpoint iterations listed per phase before "...".
_SHOWN_CHECKPOINTS = 12


def amount(n: float) -> str:
    """``2000000000`` -> ``2B``, ``15360`` -> ``15.4K``: what a reader compares at a glance."""
    for size, unit in _UNITS:
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:g}"


def _phase_name(phase: PhasePlan) -> str:
    return "pretraining" if phase.branch is None else f"cooldown {phase.branch}"


def _start(phase: PhasePlan) -> str:
    if phase.branch is None or phase.from_scratch:
        return "scratch"
    return f"pretraining iter {phase.start_iter}"


def phase_choices(plan: ExperimentPlan) -> dict[str, str]:
    """Phase key -> its name in the trigger form: ``cooldown 2B, from pretraining iter 30000``."""
    return {p.key: _phase_name(p) + ("" if p.branch is None else f", from {_start(p)}") for p in plan.phases}


def _get(params: Mapping[str, Any], *keys: str) -> list[Any]:
    """The values of ``keys``, or [] when any is missing (a config names its variables as it likes)."""
    values = [params.get(k) for k in keys]
    return [] if any(v is None or v == "" for v in values) else values


def _model(params: Mapping[str, Any]) -> str:
    words = [str(params.get("MODEL", "")).strip() or "a GPT model"]
    if shape := _get(params, "NUM_LAYERS", "HIDDEN_SIZE"):
        words.append(f"{shape[0]} layers of width {shape[1]}")
    if heads := _get(params, "NUM_ATTN_HEADS"):
        words.append(f"{heads[0]} attention heads")
    if (count := param_count(params)) is not None:
        words.append(f"about {amount(count)} parameters")
    return ", ".join(words)


def _learning_rate(params: Mapping[str, Any]) -> str:
    words = [f"peak {params['LR']}" if "LR" in params else "as the training script's default"]
    if warmup := _get(params, "LR_WARMUP_ITERS"):
        words.append(f"warmup {warmup[0]} iterations")
    if style := _get(params, "LR_DECAY_STYLE"):
        words.append(f"{style[0]} schedule")
    if low := _get(params, "MIN_LR"):
        words.append(f"down to {low[0]}")
    if wd := _get(params, "WD"):
        words.append(f"weight decay {float(wd[0]):.3g}")
    return ", ".join(words)


def _batch(params: Mapping[str, Any], tokens_per_iter: int | None) -> str:
    words = []
    if gbs := _get(params, "GLOBAL_BATCH_SIZE"):
        words.append(f"{gbs[0]} sequences")
    if seq := _get(params, "SEQ_LENGTH"):
        words.append(f"of {seq[0]} tokens")
    if tokens_per_iter:
        words.append(f"= {amount(tokens_per_iter)} tokens per iteration")
    if mbs := _get(params, "MICRO_BATCH_SIZE"):
        words.append(f"(micro-batch {mbs[0]})")
    return " ".join(words) or "as the training script's default"


def _data(params: Mapping[str, Any]) -> str:
    name = str(params.get("DATASET_NAME", "")).strip()
    words = [f"{name}: " if name else ""]
    path = params.get("DATA_PATH")
    words.append(f"`{path}`" if path else "as the training script's default")
    if tokenizer := _get(params, "TOKENIZER_MODEL"):
        words.append(f", tokenizer `{tokenizer[0]}`")
    return "".join(words)


def _tokens(phase: PhasePlan) -> str:
    return "" if phase.tokens_per_iter is None else amount(phase.tokens_per_iter * phase.train_iters)


def _phases(plan: ExperimentPlan) -> list[str]:
    lines = [
        "| phase | starts from | trains to iteration | tokens seen at the end "
        "| checkpoints converted + evaluated |",
        "|---|---|---|---|---|",
    ]
    for p in plan.phases:
        its = ", ".join(map(str, p.checkpoints[:_SHOWN_CHECKPOINTS]))
        more = " ..." if len(p.checkpoints) > _SHOWN_CHECKPOINTS else ""
        lines.append(
            f"| {_phase_name(p)} | {_start(p)} | {p.train_iters} (saves every {p.save_interval}) "
            f"| {_tokens(p) or '?'} | {len(p.checkpoints)}: {its}{more} |"
        )
    return lines


def _files(dag_plan: DagPlan) -> list[str]:
    """The run folder once, everything inside it relative to it (the full paths drown the page)."""
    plan = dag_plan.experiment
    base = plan.pretrain.run_dir.rstrip("/")

    def rel(path: str) -> str:
        return f"`{path[len(base) + 1 :]}`" if path.startswith(base + "/") else f"`{path}`"

    train_log = run_layout.train_output(plan.pretrain.train.output_file, plan.pretrain.run_dir)
    return [
        f"Run folder `{base}`, holding:",
        *[f"- {_phase_name(p)} checkpoints: {rel(p.checkpoint_dir)}" for p in plan.phases],
        f"- pretraining log, one per Slurm job: {rel(train_log)}",
        f"- evaluation results: {rel(dag_plan.eval_results_dir)}",
        f"- report: {rel(dag_plan.report_dir)}",
        f"- Slurm scripts as submitted: {rel(dag_plan.remote_dir)}",
    ]


def doc_md(dag_plan: DagPlan, config_path: str, digest: str) -> str:
    """Markdown shown on the DAG page: what the experiment is, its phases and where its files are."""
    plan = dag_plan.experiment
    params = plan.pretrain.train.params
    lines = [
        f"# {plan.name}",
        "",
        f"- **Model**: {_model(params)}",
        f"- **Learning rate**: {_learning_rate(params)}",
        f"- **Batch**: {_batch(params, plan.pretrain.tokens_per_iter)}",
        f"- **Data**: {_data(params)}",
        f"- **Token budget**: {_tokens(plan.pretrain) or '?'} tokens for pretraining"
        + "".join(f"; {_tokens(c) or '?'} for cooldown {c.branch}" for c in plan.cooldowns),
        "",
        "## Phases",
        *_phases(plan),
        "",
        "## Where its files are",
        *_files(dag_plan),
    ]
    notes = [*plan.notes, *dag_plan.notes]
    if notes:
        lines += ["", "## Notes", *[f"- {n}" for n in notes]]
    lines += ["", f"From `{config_path}` (sha256 `{digest}`): {len(plan.jobs)} Slurm jobs."]
    return "\n".join(lines)
