"""What the factory relies on of Airflow's mapped task groups (public ``@task_group`` + ``expand_kwargs``)
and of the text Airflow stores for a mapped template field: an Airflow change fails here first."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from airflow.sdk import DAG, BaseOperator, task_group

from autoexp.campaign.dags.mapped_instances import Instances
from tests.airflow_versions import DagSerialization


class Probe(BaseOperator):
    template_fields = ("value",)

    def __init__(self, *, value: object, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value


def _probe_dag(dag_id: str, values: list[dict[str, Any]]) -> DAG:
    @task_group(group_id="g")
    def group(iteration: Any, out: Any) -> None:
        Probe(task_id="t", value=out)

    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        group.expand_kwargs(values)
    return dag


def test_a_mapped_argument_resolves_per_instance() -> None:
    values = Instances({"iteration": i, "out": f"o{i}"} for i in range(40))
    argument = _probe_dag("internals_probe", values).task_dict["g.t"].value
    for index in (0, 39):
        assert argument.resolve({"ti": SimpleNamespace(map_index=index)}) == f"o{index}"


def test_a_mapped_field_is_stored_as_the_text_of_its_instances() -> None:
    """The serialized DAG holds a mapped field as its argument's text, which holds the expand input's:
    Instances keep it short, a plain list writes every instance's values (truncated at 4 KB)."""

    def stored(values: list[dict[str, Any]]) -> str:
        tasks = DagSerialization.serialize_dag(_probe_dag("internals_text", values))["tasks"]
        return str(next(t["__var"]["value"] for t in tasks if t["__var"]["task_id"] == "g.t"))

    values = [{"iteration": i, "out": "x" * 200} for i in range(40)]
    assert stored(Instances(values)) == (
        "MappedArgument(_input=ListOfDictsExpandInput(value=<40 instances>), _key='out')"
    )
    assert len(stored(values)) > 4000  # what each mapped field costs without
