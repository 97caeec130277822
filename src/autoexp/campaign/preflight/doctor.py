"""`autoexp doctor`: preflight of a cluster for one config, one line per check (no Airflow import).

The checks run shell commands through a ``Remote`` (the Airflow side passes the Slurm plugin's SSH hook,
which checks the host key). Each one says what it checked and, on failure, what to change; the first
failed check does not stop the others, so one run lists everything that would fail 1,080 jobs.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from autoexp.campaign.preflight import job_limits, tool_stage

MIN_FREE_GIB = 1.0


class Result(Protocol):
    exit_status: int
    stdout: str
    stderr: str


class Remote(Protocol):
    def run(self, command: str, *, stdin: str | None = None, timeout: float | None = None) -> Any: ...


@dataclass(frozen=True)
class Check:
    """One line of the report: ``OK name: detail`` or ``FAIL name: detail``."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        return f"{'OK  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


@dataclass(frozen=True)
class Probe:
    """What doctor checks for one config: one rendered script per template, and the cluster paths."""

    scripts: Sequence[tuple[str, str]]  # (template shown in the report, rendered script)
    remote_dir: str
    container_runtime: str
    container_image: str
    container_args: str
    python: str
    tools: Sequence[tuple[str, str]]  # (TOOLS_ROOT, TOOLS_HASH)
    pool: str = "slurm"  # the Airflow pool the config's Slurm tasks run in
    account: str | None = None  # ACCOUNT and QOS, to pick the association and QOS whose limits apply
    qos: str | None = None


def _last_line(result: Result) -> str:
    text = (result.stderr or result.stdout).strip()
    return text.splitlines()[-1] if text else f"exit status {result.exit_status}"


def _check(remote: Remote, name: str, command: str, ok_detail: Callable[[str], str], fix: str) -> Check:
    result = remote.run(command, timeout=60)
    if result.exit_status == 0:
        return Check(name, True, ok_detail(result.stdout.strip()))
    return Check(name, False, f"{_last_line(result)}; {fix}")


def slurm_checks(remote: Remote) -> Iterator[Check]:
    """sbatch, sacct and scontrol on the PATH of a login shell; accounting on (the DAGs read sacct)."""
    yield _check(
        remote,
        "slurm commands",
        "for c in sbatch sacct scontrol squeue scancel; do command -v $c >/dev/null || "
        '{ echo "$c not on the PATH" >&2; exit 1; }; done; sbatch --version',
        lambda out: f"sbatch, sacct, scontrol, squeue, scancel found ({out})",
        "load Slurm's module in the login shell the SSH connection opens",
    )
    yield _check(
        remote,
        "accounting",
        "t=$(scontrol show config | sed -n 's/^AccountingStorageType *= *//p'); "
        'case "$t" in ""|*none*) echo "AccountingStorageType is ${t:-unset}" >&2; exit 1 ;; esac; '
        'sacct -n -X -S now-1hours -o JobID >/dev/null && echo "$t"',
        lambda out: f"on ({out}), sacct answers",
        "the DAGs follow jobs through sacct: ask the admins for slurmdbd accounting",
    )


def limits_check(remote: Remote, probe: Probe, pool_slots: int) -> Check:
    """The user's association/QOS job limits, and whether the pool's slots fit under them."""
    try:
        limits = job_limits.read(remote, probe.account, probe.qos)
    except job_limits.LimitsParseError as exc:
        return Check("job limits", False, f"{exc}; the pool cannot be sized against them")
    ok, text = job_limits.pool_fit(limits, probe.pool, pool_slots)
    return Check("job limits", ok, text)


def script_checks(remote: Remote, scripts: Sequence[tuple[str, str]]) -> Iterator[Check]:
    """``sbatch --test-only`` of one rendered script per template: account, partition, QOS, GRES, time."""
    for template, script in scripts:
        result = remote.run("cd /tmp && sbatch --test-only", stdin=script, timeout=60)
        text = (result.stderr + result.stdout).strip()
        name = f"sbatch --test-only {template}"
        if result.exit_status == 0:
            yield Check(name, True, text.splitlines()[-1] if text else "accepted")
        else:
            yield Check(name, False, f"{_last_line(result)}; check ACCOUNT, PARTITION, QOS, GRES and TIME")


def container_checks(remote: Remote, runtime: str, image: str) -> Iterator[Check]:
    if runtime == "none":
        return
    yield _check(
        remote,
        f"container runtime {runtime}",
        f"command -v {shlex.quote(runtime)}",
        lambda out: f"found ({out})",
        "install it or set CONTAINER_RUNTIME (apptainer, singularity or none)",
    )
    yield _check(
        remote,
        f"container image {image}",
        f"test -r {shlex.quote(image)} || {{ echo 'not found or not readable' >&2; exit 1; }}",
        lambda _: "readable",
        "set CONTAINER_IMAGE to an image file on the cluster",
    )


def folder_check(remote: Remote, what: str, folder: str, min_free_gib: float = MIN_FREE_GIB) -> Check:
    """``folder`` can be created and written, and has ``min_free_gib`` free."""
    q = shlex.quote(folder)
    result = remote.run(
        f'mkdir -p {q} && t=$(mktemp -p {q} .autoexp-doctor.XXXXXX) && rm -f "$t" && '
        f"df -Pk {q} | awk 'NR==2 {{print $4}}'",
        timeout=60,
    )
    name = f"{what} {folder}"
    if result.exit_status != 0:
        return Check(name, False, f"not writable: {_last_line(result)}")
    free = int(result.stdout.split()[-1]) / 2**20 if result.stdout.split() else 0.0
    if free < min_free_gib:
        return Check(name, False, f"writable, but only {free:.2f} GiB free (< {min_free_gib} GiB)")
    return Check(name, True, f"writable, {free:.1f} GiB free")


# What the conversion and evaluation jobs import with the configured interpreter.
JOB_IMPORTS = (
    "autoexp_cluster.convert_eval",
    "megatron.core",
    "transformers",
    "lm_eval",
)


def import_check(remote: Remote, probe: Probe, root: str, digest: str) -> Check:
    """The staged tools import with the configured interpreter (inside the container when there is one)."""
    folder = tool_stage.tool_dir(root, digest)
    prefix = ""
    if probe.container_runtime != "none":
        args = " ".join(shlex.quote(a) for a in probe.container_args.split())
        prefix = f"{shlex.quote(probe.container_runtime)} exec {args} {shlex.quote(probe.container_image)} "
    # A conversion job checks its export against megatron-core's forward pass (export_check).
    code = f"import {', '.join(JOB_IMPORTS)}; print('imports')"
    command = (
        f"test -e {shlex.quote(folder)}/{tool_stage.COMPLETE} && "
        f"PYTHONPATH={shlex.quote(folder)} {prefix}{shlex.quote(probe.python)} -c {shlex.quote(code)}"
    )
    return _check(
        remote,
        f"tools {folder}",
        command,
        lambda _: f"staged; autoexp_cluster imports with {probe.python}",
        "PYTHON must have torch, megatron-core, transformers and lm-eval (docs/cluster-tools.md)",
    )


Stager = Callable[[Sequence[tuple[str, str]]], object]


def run_checks(
    remote: Remote,
    probe: Probe,
    stage: Stager,
    *,
    route: str = "host key accepted",
    pool_slots: int = job_limits.DEFAULT_POOL_SLOTS,
) -> list[Check]:
    """Every check in order; ``stage`` installs the tool folders (the Airflow side's stage_tools);
    ``route`` says which hops' host keys were checked; ``pool_slots`` is the pool's size now."""
    checks = [Check("ssh", True, f"connected, {route}")]
    checks += slurm_checks(remote)
    checks.append(limits_check(remote, probe, pool_slots))
    checks += script_checks(remote, probe.scripts)
    checks += container_checks(remote, probe.container_runtime, probe.container_image)
    checks.append(folder_check(remote, "remote_dir", probe.remote_dir))
    for root, digest in probe.tools:
        checks.append(folder_check(remote, "TOOLS_ROOT", root))
        if not checks[-1].ok:
            continue
        try:
            stage([(root, digest)])
        except Exception as exc:  # reported as the check's line, never a traceback
            name = f"tools {tool_stage.tool_dir(root, digest)}"
            checks.append(Check(name, False, f"staging failed: {exc}"))
            continue
        checks.append(import_check(remote, probe, root, digest))
    return checks


def probe_for(config: Any, overrides: Sequence[str] = ()) -> tuple[Probe, str]:
    """The probe of one config, and the SSH connection id its `airflow:` section names."""
    from pathlib import Path

    from autoexp.campaign.configs.planned_config import load_plans
    from autoexp.campaign.planning.dag_plan import plan_dag
    from autoexp.config import expand, load_config, render

    path = Path(config)
    plans, settings = load_plans(path, overrides)
    jobs = expand(load_config(path, overrides))
    first: dict[str, Any] = {}
    for job in jobs:
        first.setdefault(str(job.template), job)
    scripts = [(str(job.params.get("template", template)), render(job)) for template, job in first.items()]
    params = jobs[0].params
    probe = Probe(
        scripts=scripts,
        remote_dir=plan_dag(plans[0], settings).remote_dir,
        container_runtime=str(params.get("CONTAINER_RUNTIME", "none")),
        container_image=str(params.get("CONTAINER_IMAGE", "")),
        container_args=str(params.get("CONTAINER_ARGS", "")),
        python=str(params.get("PYTHON", "python3")),
        tools=tool_stage.targets([job.params for job in jobs]),
        pool=settings.pool_name,
        account=str(params["ACCOUNT"]) if params.get("ACCOUNT") else None,
        qos=str(params["QOS"]) if params.get("QOS") else None,
    )
    return probe, settings.ssh_conn_id
