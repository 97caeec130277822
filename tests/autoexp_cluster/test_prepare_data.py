"""Data prep: deterministic corpus, the CLI's outputs, file:line errors for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from autoexp_cluster.corpus import documents
from autoexp_cluster.prepare_data import read_text_files

from tests.autoexp_cluster.conftest import INCLUDE, DemoData


def test_corpus_is_deterministic_and_seeded() -> None:
    assert list(documents(20, seed=3)) == list(documents(20, seed=3))
    assert list(documents(20, seed=3)) != list(documents(20, seed=4))


def test_demo_dataset_is_megatron_indexed(demo_data: DemoData) -> None:
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    ds = IndexedDataset(str(demo_data.prefix))
    assert len(ds) == 600
    assert (demo_data.tokenizer / "tokenizer.json").is_file()


def test_bad_jsonl_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "docs.jsonl"
    bad.write_text('{"text": "ok"}\n{"body": "no text key"}\n')
    with pytest.raises(ValueError, match=r"docs\.jsonl:2: expected a JSON object with a 'text' key"):
        read_text_files([bad])


def test_cli_reports_missing_input_in_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "autoexp_cluster.prepare_data", "--output", str(tmp_path), "--input",
         str(tmp_path / "missing.txt")],
        capture_output=True, text=True, check=False,
        env={"PYTHONPATH": str(INCLUDE), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("prepare_data: error: [Errno 2]")
    assert "missing.txt" in proc.stderr
    assert "Traceback" not in proc.stderr
