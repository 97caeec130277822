"""The ``autoexp`` command line: validate, list, render and show an AutoExperiment config; set up Airflow."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from autoexp.cli import fit as cli_fit
from autoexp.cli import status as cli_status
from autoexp.config import (
    ConfigError,
    Job,
    check_job_name_line,
    expand_with_axes,
    experiment_key,
    filter_jobs,
    load_config,
    parse_filters,
    render,
)
from autoexp.config.substitute import close_matches

EXIT_CONFIG_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autoexp",
        description="Expand, check and render AutoExperiment configs; airflow-setup prepares Airflow.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str, filters: bool = True) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        cmd.add_argument("config", type=Path, help="the YAML config")
        if filters:
            cmd.add_argument(
                "filters", nargs="*", metavar="KEY=V1,V2", help="keep jobs whose KEY is one of V1,V2"
            )
        cmd.add_argument(
            "-f",
            "--fix",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override before expansion (VALUE is YAML: 5e-4 is a float; KEY may be dotted)",
        )
        return cmd

    add("validate", "expand the config, render every template, and print a one-line summary")
    listing = add("list", "one row per job: its name and the axis values that distinguish it")
    listing.add_argument("--format", choices=("table", "json"), default="table")
    rendering = add("render", "print one job's rendered sbatch script, or write every job's under --out")
    rendering.add_argument("--job", help="the job name (needed when the config has several jobs)")
    rendering.add_argument("--out", type=Path, help="write <name>.sbatch for every job into this folder")
    show = add("show", "every variable of one job, its value and the file:line that set it", filters=False)
    show.add_argument("name", help="the job name")
    doctor = add(
        "doctor",
        "preflight of the cluster for this config, one line per check (SSH, Slurm, sbatch --test-only of "
        "each template, container, folders, staged tools); exit 1 if any fails",
        filters=False,
    )
    doctor.add_argument("--conn-id", help="Airflow SSH connection (default: the config's ssh_conn_id)")
    setup_help = (
        "create the Airflow pools the configs name (deferred tasks counted) after checking their SSH "
        "connections exist; run where Airflow's metadata database is reachable"
    )
    setup = sub.add_parser("airflow-setup", help=setup_help, description=setup_help)
    setup.add_argument("configs", nargs="+", type=Path, metavar="CONFIG", help="the YAML configs")
    setup.add_argument("--slots", type=int, help="pool slots (default: an existing pool's, else 8)")
    cli_status.add_parser(sub)
    cli_fit.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``autoexp``; returns the exit status (2 on any config error)."""
    args = _parser().parse_args(argv)
    try:
        return int(_COMMANDS[args.command](args))
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG_ERROR
    except BrokenPipeError:  # `autoexp list ... | head`
        return 0


def _jobs(args: argparse.Namespace) -> tuple[list[Job], list[str]]:
    config = load_config(args.config, args.fix)
    jobs, axes = expand_with_axes(config)
    filters = parse_filters(getattr(args, "filters", []))
    return (filter_jobs(jobs, filters) if filters else jobs), axes


def _validate(args: argparse.Namespace) -> int:
    jobs, _ = _jobs(args)
    for job in jobs:
        if job.template is not None:
            check_job_name_line(job, render(job))
    experiments = len({experiment_key(j) for j in jobs})
    templates = len({j.template for j in jobs if j.template is not None})
    print(f"{args.config}: OK: {len(jobs)} jobs, {experiments} experiments, {templates} templates")
    return 0


def _list(args: argparse.Namespace) -> int:
    jobs, axes = _jobs(args)
    if args.format == "json":
        rows = [{"name": j.name, "params": dict(j.params)} for j in jobs]
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    columns = [a for a in axes if len({str(j.params.get(a, "")) for j in jobs}) > 1]
    table = [["name", *columns]] + [[j.name, *(_cell(j.params.get(c)) for c in columns)] for j in jobs]
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _render(args: argparse.Namespace) -> int:
    jobs, _ = _jobs(args)
    if args.out is not None:
        selected = [j for j in jobs if args.job in (None, j.name)]
        if not selected:
            raise ConfigError(str(args.config), 1, "", f"no job named {args.job!r}")
        for job in selected:
            if "/" in job.name or job.name.startswith(".") or "\0" in job.name:
                where, line = job.origin("name").rsplit(":", 1)
                raise ConfigError(where, int(line), "name", f"job name {job.name!r} cannot be a file name")
        scripts = [(job, render(job)) for job in selected]  # render all before writing anything
        args.out.mkdir(parents=True, exist_ok=True)
        for job, script in scripts:
            (args.out / f"{job.name}.sbatch").write_text(script, encoding="utf-8")
        print(f"wrote {len(scripts)} scripts to {args.out}", file=sys.stderr)
        return 0
    if args.job is None:
        if len(jobs) != 1:
            raise ConfigError(
                str(args.config),
                1,
                "",
                f"{len(jobs)} jobs match; name one with --job or write all with --out DIR",
            )
        job = jobs[0]
    else:
        job = _find(jobs, args.job, str(args.config))
    sys.stdout.write(render(job))
    return 0


def _show(args: argparse.Namespace) -> int:
    jobs, _ = _jobs(args)
    job = _find(jobs, args.name, str(args.config))
    width = max(len(k) for k in job.params)
    for key, value in job.params.items():
        print(f"{key.ljust(width)}  {json.dumps(value)}  ({job.origin(key)})")
    return 0


def _find(jobs: list[Job], name: str, config: str) -> Job:
    for job in jobs:
        if job.name == name:
            return job
    raise ConfigError(config, 1, "", f"no job named {name!r}{close_matches(name, [j.name for j in jobs])}")


def _airflow_setup(args: argparse.Namespace) -> int:
    # Imported here: the other commands and autoexp.config never import Airflow.
    from autoexp.campaign.planning.plan import config_errors
    from autoexp.cli.airflow_setup import SetupError, airflow_setup
    from autoexp.cli.pools import PoolCliError

    errors: tuple[type[Exception], ...] = (SetupError, PoolCliError, *config_errors())
    try:
        done = airflow_setup(args.configs, args.slots)
    except errors as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG_ERROR
    for pool in done:
        verb = "created" if pool.created else "updated"
        print(
            f"pool {pool.pool} {verb}: {pool.slots} slots, deferred tasks counted (SSH {pool.ssh_conn_id}); "
            f"{pool.limits}"
        )
    return 0


def _doctor(args: argparse.Namespace) -> int:
    # Imported here: the other commands and autoexp.config never import Airflow.
    from autoexp.campaign.planning.plan import config_errors
    from autoexp.cli.doctor import doctor

    try:
        checks = doctor(args.config, args.fix, args.conn_id)
    except config_errors() as exc:
        print(exc, file=sys.stderr)
        return EXIT_CONFIG_ERROR
    for check in checks:
        print(check.line())
    failed = sum(not c.ok for c in checks)
    print(f"{len(checks) - failed} of {len(checks)} checks passed", file=sys.stderr)
    return 1 if failed else 0


_COMMANDS = {
    "validate": _validate,
    "list": _list,
    "render": _render,
    "show": _show,
    "airflow-setup": _airflow_setup,
    "doctor": _doctor,
    "status": cli_status.run_status,
    "fit": cli_fit.run,
}
