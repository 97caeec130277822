"""What the factory relies on of Airflow's private mapped-task-group API (airflow_internals, DAG building)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, BaseOperator

from autoexp.campaign.dags.airflow_internals import ListOfDictsExpandInput, MappedArgument, MappedTaskGroup


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
