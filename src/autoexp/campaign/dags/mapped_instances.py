"""What a mapped checkpoint group is expanded over: its instances, in a list whose text is short."""

from __future__ import annotations

from typing import Any


class Instances(list[dict[str, Any]]):
    """A mapped group's instances (one dict of argument values each), whose text is short.

    Airflow stores a template field it cannot encode as the value's text (``serialize_template_field``),
    and a mapped argument's text holds its group's whole expand input, so this list's text: the five
    mapped fields of a conversion task wrote 5 x 4 KB (the truncation limit) of it into each
    serialized DAG, more than half of its size.
    """

    def __repr__(self) -> str:
        return f"<{len(self)} instances>"
