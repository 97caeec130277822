"""The Campaigns pages' JavaScript: it parses (a raw newline inside a string literal once left the page
on 'loading...'), and a waiting training reads "pending: <why, est. start>"."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from autoexp.campaign.ui import pages


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run the pages' JavaScript")
@pytest.mark.parametrize("page", [pages.CAMPAIGNS_PAGE, pages.EXPERIMENT_PAGE])
def test_the_pages_say_pending_with_the_note_and_their_scripts_parse(page: str, tmp_path: Path) -> None:
    (script,) = re.findall(r"<script>(.*?)</script>", page, re.S)
    (tmp_path / "page.js").write_text(script)
    checked = subprocess.run(["node", "--check", tmp_path / "page.js"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr  # a raw newline in a string literal breaks the page
    (fn,) = re.findall(r"^function training\(.*$", script, re.M)
    calls = 'console.log(training({state: "deferred", pending: "Priority"}), training({state: "running"}))'
    out = subprocess.run(["node", "-e", f"{fn}\n{calls}"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "pending: Priority running"
