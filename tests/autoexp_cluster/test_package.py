"""The cluster tools' package: what importing it sets up for every job."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.autoexp_cluster.conftest import INCLUDE

# Import megatron-core as a training does, then say whether torch.compile's backend got loaded.
PROBE = (
    "import autoexp_cluster.model, megatron.core.models.gpt, sys; "
    "print('torch._inductor.compile_fx' in sys.modules)"
)


def _inductor_loaded(**env: str) -> bool:
    clean = {k: v for k, v in os.environ.items() if k != "TORCHDYNAMO_DISABLE"}
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", PROBE],
        env={**clean, "PYTHONPATH": str(INCLUDE), **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.ml
def test_a_job_imports_megatron_without_torch_compiles_backend() -> None:
    assert not _inductor_loaded()


@pytest.mark.ml
def test_a_jobs_own_torchdynamo_setting_wins() -> None:
    assert _inductor_loaded(TORCHDYNAMO_DISABLE="0")
