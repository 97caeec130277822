"""README.md's layout table matches the tree: every path it names exists, every part of the tree is named."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layout_paths() -> list[str]:
    """The paths in the first column of the table under ``## Layout`` (each cell may name several)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [p.rstrip("/") for row in rows for p in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_every_path_of_the_layout_table_exists() -> None:
    paths = layout_paths()
    assert len(paths) >= 10, paths
    assert [p for p in paths if not (REPO / p).exists()] == []


def test_every_part_of_the_tree_is_in_the_layout_table() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    top = {line.split("/", 1)[0] for line in tracked.stdout.splitlines() if "/" in line}
    top -= {".ci"}  # CI's entry point, named in the README's text
    # The package folders the architecture names, each with a row of its own.
    wanted = top - {"src"} | {f"src/autoexp/{p.name}" for p in (REPO / "src/autoexp").iterdir() if p.is_dir()}
    wanted -= {"src/autoexp/__pycache__", "src/autoexp/campaign"}
    campaign = REPO / "src/autoexp/campaign"
    wanted |= {f"src/autoexp/campaign/{p.name}" for p in campaign.iterdir() if (p / "__init__.py").exists()}
    named = layout_paths()
    assert sorted(w for w in wanted if not any(n == w or n.startswith(w + "/") for n in named)) == []
