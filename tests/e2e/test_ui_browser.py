"""The Airflow UI in a real browser (Debian's headless chromium) names what it shows.

One stack, one run of the reduced demo with a training and a conversion that only write what their
real counterparts leave behind (checkpoints, tracker, done marker): what is under test is what the
UI shows of the DAG, not Megatron. The grid of the run, the conversions' mapped instances and the
trigger form are opened and screenshotted (PNG, under the test's tmp folder; copied to
``$AUTOEXP_SCREENSHOTS`` when set).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.campaign import DAG_ID, reduced_config, start_module_stack
from tests.fixtures.airflow_stack import AirflowStack
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
CONVERT = "pretrain.checkpoints.convert_eval"

# Megatron's legacy layout at the two saves of the reduced demo in its ``--save`` folder, then the
# line the config's termination_str looks for.
FAKE_TRAIN = """\
import pathlib, sys, zipfile
checkpoints = pathlib.Path(sys.argv[sys.argv.index("--save") + 1])
for it in (20, 40):
    rank = checkpoints / f"iter_{it:07d}" / "mp_rank_00"
    rank.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(rank / "model_optim_rng.pt", "w") as zf:
        zf.writestr("archive/data.pkl", b"weights")
        zf.writestr("archive/version", "3\\n")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(it))
print("after training is done", flush=True)
"""
# A convert+eval template (str.format over the file, literal braces doubled): the done marker and
# an lm-eval shaped result for the one checkpoint CKPT_ITER names.
FAKE_CONVERT = """\
#!/bin/bash
#SBATCH --account={ACCOUNT}
#SBATCH --partition={PARTITION}
#SBATCH --nodes=1
#SBATCH --time=00:05:00
#SBATCH --output={output_file}
#SBATCH --job-name={name}
set -eu
mkdir -p "{RUN_DIR}/converted_checkpoints" "{RUN_DIR}/eval_results/iter_${{CKPT_ITER}}"
echo '{{"results": {{"autoexp-tiny": {{"acc,none": 0.5}}}}}}' \\
    > "{RUN_DIR}/eval_results/iter_${{CKPT_ITER}}/results.json"
touch "{RUN_DIR}/converted_checkpoints/iter_${{CKPT_ITER}}.done"
"""


@dataclass
class Ui:
    stack: AirflowStack
    run_id: str
    browser: WebDriver
    shots: Path

    def open(self, path: str) -> None:
        self.browser.get(f"http://127.0.0.1:{self.stack.port}/{path.lstrip('/')}")

    def shows(self, *texts: str, timeout: float = 60) -> str:
        """The page's visible text once it holds every one of ``texts`` (fails naming the missing)."""
        body = ""

        def has_all(browser: WebDriver) -> bool:
            nonlocal body
            body = browser.find_element(By.TAG_NAME, "body").text
            return all(t in body for t in texts)

        try:
            WebDriverWait(self.browser, timeout, poll_frequency=0.5).until(has_all)
        except TimeoutException:
            missing = [t for t in texts if t not in body]
            raise AssertionError(f"not shown within {timeout} s: {missing}; page text:\n{body}") from None
        return body

    def screenshot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        assert self.browser.save_screenshot(str(path)), path
        if target := os.environ.get("AUTOEXP_SCREENSHOTS"):
            Path(target).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(target) / path.name)
        return path


def _browser() -> WebDriver:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1000"):
        options.add_argument(arg)
    # The driver is given: selenium would otherwise look for (and try to download) one.
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def ui(slurm_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    base = tmp_path_factory.mktemp("ui-browser")
    demo_dir = base / "campaign"
    (base / "fake_train.py").write_text(FAKE_TRAIN)
    (base / "fake_convert.sh").write_text(FAKE_CONVERT)
    train = (
        'TRAIN_SCRIPT: "{AUTOEXP_INCLUDE}/autoexp_cluster/pretrain_gpt.py"',
        f'TRAIN_SCRIPT: "{base / "fake_train.py"}"',
    )
    convert = '"{AUTOEXP_CHECKOUT}/include/sbatch/convert_eval_checkpoint.sh"'
    config = reduced_config(base, train, (convert, f'"{base / "fake_convert.sh"}"'))
    stack = start_module_stack(base / "home", config, demo_dir)
    browser = None
    try:
        # Pretraining only: one training, two conversions (iterations 20 and 40).
        run_id = stack.trigger(DAG_ID, {"phases": ["pretrain"]}, timeout=300)
        browser = _browser()
        shots = base / "screenshots"
        shots.mkdir()
        yield Ui(stack, run_id, browser, shots)
    finally:
        if browser is not None:
            browser.quit()
        stack.stop()


def _converted(ui: Ui) -> dict[int, str | None]:
    """map index -> rendered name of the run's conversions, once both ended."""

    def done() -> dict[int, str | None] | None:
        path = f"dags/{DAG_ID}/dagRuns/{ui.run_id}/taskInstances?task_id={CONVERT}"
        tis = ui.stack.api("GET", path)["task_instances"]
        ended = [t for t in tis if t["state"] in {"success", "failed", "upstream_failed", "skipped"}]
        if len(tis) == 2 and len(ended) == 2:
            return {t["map_index"]: t["rendered_map_index"] for t in tis}
        return None

    return ui.stack.poll("both conversions to end", done, timeout=300, interval=2)


def test_mapped_conversions_are_named_by_checkpoint(ui: Ui) -> None:
    assert _converted(ui) == {0: "iter 0000020", 1: "iter 0000040"}
    ui.open(f"dags/{DAG_ID}/runs/{ui.run_id}/tasks/{CONVERT}/mapped")
    ui.shows("iter 0000020", "iter 0000040")
    ui.screenshot("mapped-conversions")
    ui.open(f"dags/{DAG_ID}/runs/{ui.run_id}/tasks/{CONVERT}/mapped/1")
    ui.shows("iter 0000040")
    ui.screenshot("conversion-iter-40")
    # The run's grid and its task instances: the mapped ones by name, next to their task ids.
    ui.open(f"dags/{DAG_ID}/runs/{ui.run_id}")
    ui.shows("pretrain", "cooldown_8K", "pretrain.checkpoints.wait", "iter 0000020", "iter 0000040")
    ui.screenshot("grid")


def test_trigger_form_offers_the_phases_by_name(ui: Ui) -> None:
    ui.open(f"dags/{DAG_ID}")
    ui.shows("Trigger")
    button = next(b for b in ui.browser.find_elements(By.TAG_NAME, "button") if b.text.strip() == "Trigger")
    button.click()
    # A multi-select holding every phase, each by its name, with the Param's title and description.
    ui.shows(
        "Phases to run", "the phases this run drives", "pretraining", "cooldown 8K, from pretraining iter 20"
    )
    ui.shows("Dry run", "Slurm submissions per try")
    ui.screenshot("trigger-form")


def test_dag_docs_say_what_the_experiment_is(ui: Ui) -> None:
    ui.open(f"dags/{DAG_ID}")
    ui.shows("Trigger")
    ui.browser.find_element(By.CSS_SELECTOR, '[data-testid="markdown-button"]').click()
    ui.shows("Learning rate", "peak 0.003", "256 tokens per iteration", "Token budget", "Where its files are")
    ui.screenshot("dag-docs")
