"""The plugin is discovered as a provider: its info passes Airflow's schema and names what imports."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import airflow
import jsonschema
import slurm_operator
from airflow.providers_manager import ProvidersManager


def test_the_provider_info_passes_airflow_s_schema_and_every_module_it_names_imports() -> None:
    info = slurm_operator.get_provider_info()
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    assert info["package-name"] == "autoexp"  # the distribution that ships the package
    modules = [
        m
        for kind in ("hooks", "operators", "sensors", "triggers")
        for e in info[kind]
        for m in e["python-modules"]
    ]
    assert len(modules) == 6
    for module in modules:
        importlib.import_module(module)


def test_airflow_s_providers_manager_lists_it() -> None:
    provider = ProvidersManager().providers["autoexp"]
    assert provider.data["name"] == "Slurm over SSH"


def test_the_public_classes_import_from_their_sub_packages_and_old_trigger_paths_still_resolve() -> None:
    """A trigger row written before the regroup names ``slurm_operator.triggers.SlurmJobTrigger``."""
    from slurm_operator.hooks import AsyncSlurmHook, SlurmHook
    from slurm_operator.operators import SlurmOperator
    from slurm_operator.sensors import RemotePathSensor, SlurmLogSensor
    from slurm_operator.triggers import RemotePathTrigger, SlurmJobTrigger

    assert SlurmJobTrigger.__module__ == "slurm_operator.triggers.slurm_job"
    assert RemotePathTrigger.__module__ == "slurm_operator.triggers.remote_path"
    assert {
        c.__name__ for c in (AsyncSlurmHook, SlurmHook, SlurmOperator, RemotePathSensor, SlurmLogSensor)
    } == {"AsyncSlurmHook", "SlurmHook", "SlurmOperator", "RemotePathSensor", "SlurmLogSensor"}
