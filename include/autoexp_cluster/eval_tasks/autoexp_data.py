"""Data loader for the shipped tasks, resolved next to this file (stock ``lm_eval --include_path`` works).

lm-eval hands relative ``dataset_kwargs.data_files`` to ``datasets.load_dataset``, which resolves them
against the working directory; ``custom_dataset: !function autoexp_data.load_jsonl`` is lm-eval's own
way to load a task's data, and lm-eval imports this file from the YAML's folder, wherever it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_jsonl(data_files: dict[str, str], **_metadata: Any) -> Any:
    """``datasets.load_dataset("json")`` on files named relative to this folder (one per split)."""
    import datasets

    return datasets.load_dataset(
        "json", data_files={split: str(HERE / name) for split, name in data_files.items()}
    )
