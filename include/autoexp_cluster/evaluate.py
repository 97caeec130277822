"""Evaluate a HF model directory with lm-eval's Python API; write ``results.json`` atomically."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("autoexp_cluster.evaluate")

TASK_DIR_PLACEHOLDER = "__TASK_DIR__"


class EvaluationError(Exception):
    """Evaluation could not run; ``str()`` is one line."""


def materialize_tasks(tasks_path: Path, dest: Path) -> Path:
    """Copy the task folder to ``dest``, replacing ``__TASK_DIR__`` by the source folder of each file.

    lm-eval resolves relative ``data_files`` against the working directory, so shipped tasks name
    their data through the placeholder and get absolute paths here.
    """
    if not tasks_path.is_dir():
        raise EvaluationError(f"{tasks_path}: tasks path is not a directory")
    for src in tasks_path.rglob("*"):
        target = dest / src.relative_to(tasks_path)
        if src.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif src.suffix in (".yaml", ".yml"):
            target.parent.mkdir(parents=True, exist_ok=True)
            text = src.read_text(encoding="utf-8")
            target.write_text(text.replace(TASK_DIR_PLACEHOLDER, str(src.parent.resolve())), encoding="utf-8")
        elif src.suffix == ".py":
            # `!function` helpers referenced by the YAML; data files stay where they are.
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def _task_manager(include_path: Path, names: Sequence[str]) -> Any:
    from lm_eval.tasks import TaskManager

    # Indexing lm-eval's ~14,000 built-in tasks costs ~10 s: only do it when a task needs them.
    tm = TaskManager(include_path=str(include_path), include_defaults=False)
    if all(n in tm.all_tasks for n in names):
        return tm
    tm = TaskManager(include_path=str(include_path), include_defaults=True)
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
    with tempfile.TemporaryDirectory(prefix="autoexp-tasks-") as tmp:
        include = materialize_tasks(tasks_path, Path(tmp)) if tasks_path else Path(tmp)
        tm = _task_manager(include, tasks)
        lm = HFLM(
            pretrained=str(model_dir),
            device=device,
            batch_size=batch_size,
            dtype="float32" if device == "cpu" else "auto",
            trust_remote_code=True,
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
