"""docs/real-cluster.md's config edits, applied as written, give the settings the text says."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from autoexp.campaign.planning.settings import parse_settings
from autoexp.config import load_config

REPO = Path(__file__).resolve().parents[1]


def test_the_docs_airflow_and_gate_lines_make_a_gate_at_500_gpu_hours(tmp_path: Path) -> None:
    text = (REPO / "docs" / "real-cluster.md").read_text()
    edits = [line for line in text.splitlines() if re.match(r"printf '.*' >> config/my_scaling\.yaml$", line)]
    # step 3's airflow: section, then the gate inside it, then its cooldowns key
    assert len(edits) == 3, edits
    config = tmp_path / "config" / "my_scaling.yaml"
    config.parent.mkdir()
    shutil.copy(REPO / "config" / "scaling_exps.yaml", config)
    for line in edits:
        subprocess.run(["bash", "-c", line], cwd=tmp_path, check=True)

    settings = parse_settings(load_config(config).airflow, config)
    assert settings.ssh_conn_id == "my_cluster"
    assert settings.gate.gpu_hours_threshold == 500
    assert settings.gate.tflops_per_gpu == 150
    assert settings.gate.cooldowns is True
