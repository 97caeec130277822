"""A small client of Airflow 3's public REST API (``/api/v2``): what the Campaigns page and
``autoexp status`` read. Plain urllib, no Airflow import: the CLI uses it from any machine.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_PAGE = 100  # Airflow's default [api] maximum_page_limit
_MAX_PAGES = 50


class ApiError(RuntimeError):
    """The API refused or could not be reached; ``str()`` is one line naming the URL and the status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class _TimedOut(ApiError):
    """No answer within the timeout (retried for reads)."""


@dataclass(frozen=True)
class AirflowApi:
    """The REST API at ``base_url`` (``http://host:8080``), with a JWT when the server wants one."""

    base_url: str
    token: str | None = None
    timeout: float = 30

    def call(self, method: str, path: str, body: Any = None) -> Any:
        url = f"{self.base_url.rstrip('/')}/api/v2/{path.lstrip('/')}"
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        # A read (GET, or a POST .../list) that times out is asked again: a loaded API server
        # sometimes answers after the timeout. A write is sent once (nothing submitted twice).
        reads = 3 if method == "GET" or path.endswith("/list") else 1
        for attempt in range(1, reads + 1):
            try:
                return _send(req, self.timeout)
            except _TimedOut as exc:
                if attempt == reads:
                    raise ApiError(f"{exc} ({reads} tries)") from None
        return None  # not reached

    @classmethod
    def login(cls, base_url: str, username: str, password: str, timeout: float = 30) -> AirflowApi:
        """A client holding the JWT that ``POST /auth/token`` (Airflow's auth manager) issues."""
        url = f"{base_url.rstrip('/')}/auth/token"
        body = json.dumps({"username": username, "password": password}).encode()
        headers = {"Content-Type": "application/json"}
        req = urllib.request.Request(url, data=body, method="POST", headers=headers)  # noqa: S310
        answer = _send(req, timeout)
        token = answer.get("access_token") if isinstance(answer, dict) else None
        if not token:
            raise ApiError(f"POST {url}: no access_token in the answer")
        return cls(base_url, str(token), timeout)

    def _pages(self, path: str, body: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for page in range(_MAX_PAGES):
            answer = self.call("POST", path, {**body, "page_limit": _PAGE, "page_offset": page * _PAGE})
            batch = answer.get(key, [])
            rows += batch
            if len(batch) < _PAGE or len(rows) >= int(answer.get("total_entries", 0)):
                break
        return rows

    def latest_runs(self, dag_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """DAG id -> its most recent run (by run_after), for the DAGs that have one."""
        ids = list(dag_ids)
        if not ids:
            return {}
        runs = self._pages("dags/~/dagRuns/list", {"dag_ids": ids, "order_by": "-run_after"}, "dag_runs")
        latest: dict[str, dict[str, Any]] = {}
        for run in runs:
            latest.setdefault(run["dag_id"], run)
        return latest

    def task_instances(self, runs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Every task instance (mapped ones included) of the given runs."""
        runs = list(runs)
        if not runs:
            return []
        body = {
            "dag_ids": sorted({r["dag_id"] for r in runs}),
            "dag_run_ids": [r["dag_run_id"] for r in runs],
        }
        return self._pages("dags/~/dagRuns/~/taskInstances/list", body, "task_instances")

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """A task's XCom value, or None when it has none."""
        path = "/".join(
            urllib.parse.quote(p, safe="")
            for p in ("dags", dag_id, "dagRuns", run_id, "taskInstances", task_id, "xcomEntries", key)
        )
        try:
            return self.call("GET", path).get("value")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def trigger(self, dag_id: str, conf: Mapping[str, Any]) -> dict[str, Any]:
        path = f"dags/{urllib.parse.quote(dag_id, safe='')}/dagRuns"
        answer: dict[str, Any] = self.call("POST", path, {"logical_date": None, "conf": dict(conf)})
        return answer


def _send(req: urllib.request.Request, timeout: float) -> Any:
    where = f"{req.get_method()} {req.full_url}"
    if not req.full_url.startswith(("http://", "https://")):
        raise ApiError(f"{where}: the Airflow URL must start with http:// or https://")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as answer:  # noqa: S310 (http(s) only, checked above)
            raw = answer.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200].replace("\n", " ")
        raise ApiError(f"{where}: HTTP {exc.code} {detail}", exc.code) from None
    except TimeoutError:
        raise _TimedOut(f"{where}: no answer within {timeout:.0f} s; is the API server overloaded?") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise _TimedOut(
                f"{where}: no answer within {timeout:.0f} s; is the API server overloaded?"
            ) from None
        raise ApiError(
            f"{where}: cannot reach Airflow ({reason}); is the API server up at that URL?"
        ) from None
    return json.loads(raw) if raw else None
