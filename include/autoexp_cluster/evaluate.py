"""Evaluate a HF model directory with lm-eval's Python API; write ``results.json`` atomically."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("autoexp_cluster.evaluate")

SHIPPED_REMOTE = Path(__file__).resolve().parent / "hf_remote"


class EvaluationError(Exception):
    """Evaluation could not run; ``str()`` is one line."""


def remote_code_decision(model_dir: Path) -> tuple[bool, str]:
    """Whether to pass ``trust_remote_code`` for ``model_dir``, and why (logged by ``evaluate``).

    Only the converter's own remote code is trusted: the config's ``auto_map`` names local modules
    and every ``.py`` file in the model folder is byte-identical to ``autoexp_cluster/hf_remote``.
    A model asking for any other code is refused (one line), so nothing from it is imported.
    """
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvaluationError(f"{model_dir / 'config.json'}: unreadable ({exc})") from exc
    auto_map = config.get("auto_map") if isinstance(config, dict) else None
    if not auto_map:
        return False, f"config.json has no auto_map (stock model_type {config.get('model_type')!r})"
    refs = [r for v in auto_map.values() for r in (v if isinstance(v, list) else [v]) if isinstance(r, str)]
    shipped = {p.name: p.read_bytes() for p in SHIPPED_REMOTE.glob("*.py") if p.name != "__init__.py"}
    foreign = [r for r in refs if "--" in r or f"{r.rsplit('.', 1)[0]}.py" not in shipped]
    changed = [p.name for p in sorted(model_dir.glob("*.py")) if shipped.get(p.name) != p.read_bytes()]
    if foreign or changed:
        what = ", ".join(foreign + [f"{n} (not the shipped file)" for n in changed])
        raise EvaluationError(
            f"{model_dir}: config.json asks for remote code that is not autoexp's shipped "
            f"autoexp_cluster/hf_remote: {what}; refusing to run it"
        )
    return True, f"config.json auto_map names the shipped remote code ({', '.join(sorted(set(refs)))})"


def _task_manager(include_path: Path | None, names: Sequence[str]) -> Any:
    from lm_eval.tasks import TaskManager

    include = str(include_path) if include_path is not None else None
    # Indexing lm-eval's ~14,000 built-in tasks costs ~10 s: only do it when a task needs them.
    if include is not None:
        tm = TaskManager(include_path=include, include_defaults=False)
        if all(n in tm.all_tasks for n in names):
            return tm
    tm = TaskManager(include_path=include, include_defaults=True)
    missing = [n for n in names if n not in tm.all_tasks]
    if missing:
        raise EvaluationError(f"unknown lm-eval task(s) {', '.join(missing)} (include path {include_path})")
    return tm


def evaluate(
    model_dir: Path,
    tasks: Sequence[str],
    tasks_path: Path | None,
    output: Path,
    *,
    batch_size: int | str = 8,
    device: str = "auto",
    limit: int | None = None,
    num_fewshot: int | None = None,
) -> dict[str, Any]:
    """Run lm-eval on ``model_dir`` and write the results dict (lm-eval's JSON layout) to ``output``."""
    import torch
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    if not (model_dir / "config.json").is_file():
        raise EvaluationError(f"{model_dir}: not a HF model directory (no config.json)")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if tasks_path is not None and not tasks_path.is_dir():
        raise EvaluationError(f"{tasks_path}: tasks path is not a directory")
    trust, why = remote_code_decision(model_dir)
    log.info("trust_remote_code %s: %s", "on" if trust else "off", why)
    # Any lm-eval task folder works as is: it is lm-eval's own --include_path.
    tm = _task_manager(tasks_path, tasks)
    lm = HFLM(
        pretrained=str(model_dir),
        device=device,
        batch_size=batch_size,
        dtype="float32" if device == "cpu" else "auto",
        trust_remote_code=trust,
    )
    results = simple_evaluate(
        model=lm, tasks=list(tasks), task_manager=tm, limit=limit, num_fewshot=num_fewshot
    )
    if results is None:
        raise EvaluationError(f"{model_dir}: lm-eval returned no results")
    results.pop("samples", None)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = output.with_name(output.name + ".tmp")
    tmp_out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    os.replace(tmp_out, output)
    return dict(results)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout)
    p = argparse.ArgumentParser(prog="python -m autoexp_cluster.evaluate", description=__doc__)
    p.add_argument("--model", type=Path, required=True, help="HF model directory")
    p.add_argument("--tasks", required=True, help="comma-separated lm-eval tasks or groups")
    p.add_argument("--tasks-path", type=Path, default=None, help="lm-eval include path")
    p.add_argument("--output", type=Path, required=True, help="results.json path")
    p.add_argument("--batch-size", default="8")
    p.add_argument("--device", default="auto")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--num-fewshot", type=int, default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    batch: int | str = int(args.batch_size) if args.batch_size.isdigit() else args.batch_size
    t0 = time.perf_counter()
    try:
        results = evaluate(
            args.model, tasks, args.tasks_path, args.output,
            batch_size=batch, device=args.device, limit=args.limit, num_fewshot=args.num_fewshot,
        )  # fmt: skip
    except EvaluationError as exc:
        print(f"evaluate: error: {exc}", file=sys.stderr)
        return 1
    from lm_eval.utils import make_table

    print(make_table(results))
    print(f"wrote {args.output} in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
