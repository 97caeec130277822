"""What the factory relies on of Airflow's private mapped-task-group API (airflow_internals, DAG building)."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from airflow.sdk import DAG, BaseOperator

from autoexp.campaign.dags.airflow_internals import (
    KeyedMappedArgument,
    ListOfDictsExpandInput,
    MappedArgument,
    MappedTaskGroup,
)
from tests.airflow_versions import DagSerialization


class Probe(BaseOperator):
    template_fields = ("value",)

    def __init__(self, *, value: object, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.value = value


def test_a_group_built_from_a_list_of_dicts_maps_each_key_per_instance() -> None:
    values = [{"iteration": 4, "out": "a"}, {"iteration": 8, "out": "b"}]
    expand_input = ListOfDictsExpandInput(values)
    with (
        DAG("internals_probe", schedule=None, start_date=datetime(2026, 1, 1)) as dag,
        MappedTaskGroup(group_id="g", expand_input=expand_input) as group,
    ):
        Probe(task_id="t", value=MappedArgument(input=expand_input, key="iteration"))
    # The value the factory hands in is kept as given (no XCom walk), and one instance per dict.
    assert group._expand_input is expand_input
    assert expand_input.value == values
    assert list(expand_input.iter_references()) == []  # plain values: nothing upstream to wait for
    argument = dag.task_dict["g.t"].value
    assert isinstance(argument, MappedArgument)
    assert argument._key == "iteration"
    assert argument._input is expand_input


def test_a_keyed_argument_is_stored_as_its_key_and_resolves_per_instance() -> None:
    """The serialized DAG holds "<mapped key>" for the field, not every instance's values (which
    Airflow writes as the argument's text, truncated at 4 KB); each instance still gets its own value."""
    values = [{"iteration": i, "out": "x" * 200} for i in range(40)]
    expand_input = ListOfDictsExpandInput(values)
    with (
        DAG("internals_keyed", schedule=None, start_date=datetime(2026, 1, 1)) as dag,
        MappedTaskGroup(group_id="g", expand_input=expand_input),
    ):
        Probe(task_id="keyed", value=KeyedMappedArgument(input=expand_input, key="out"))
        Probe(task_id="plain", value=MappedArgument(input=expand_input, key="out"))
    tasks = {t["__var"]["task_id"]: t["__var"] for t in DagSerialization.serialize_dag(dag)["tasks"]}
    assert tasks["g.keyed"]["value"] == "<mapped out>"
    assert len(tasks["g.plain"]["value"]) > 4000  # what a plain MappedArgument costs each field
    argument = dag.task_dict["g.keyed"].value
    for index in (0, 39):
        assert argument.resolve({"ti": SimpleNamespace(map_index=index)}) == values[index]["out"]
