"""The Campaigns plugin's FastAPI app, mounted by Airflow's API server at ``/campaigns``.

Every route requires the same login as Airflow's UI: Airflow's own ``get_user`` dependency (the
JWT of the ``Authorization`` header or of the UI's ``_token`` cookie, checked by the configured
auth manager); a plugin app is not protected otherwise. Airflow's metadata is read through the
public REST API with the caller's own token, not through the API server's database session: the
page then shows exactly what that user may read, a trigger is refused where the user may not
trigger, and the REST API is a stable contract where the metadata tables are not.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse
from pydantic import BaseModel
from slurm_operator import airflow_internals
from slurm_operator.airflow_public import conf

from autoexp.campaign.configs.config_source import config_paths, default_config_dir
from autoexp.campaign.planning import campaign_slice as cs
from autoexp.campaign.planning.plan import config_errors
from autoexp.campaign.ui import campaign_view as cv
from autoexp.campaign.ui.airflow_api import AirflowApi, ApiError
from autoexp.campaign.ui.pages import CAMPAIGNS_PAGE, EXPERIMENT_PAGE

URL_ENV = "AUTOEXP_AIRFLOW_URL"
get_user, COOKIE_NAME_JWT_TOKEN = airflow_internals.api_login()  # a plugin app has no login of its own


def _api_url(request: Request) -> str:
    """Where this API server answers for its own REST API: $AUTOEXP_AIRFLOW_URL, else the
    [api] host and port on loopback when it listens on every interface."""
    if url := os.environ.get(URL_ENV):
        return url
    host = conf.get("api", "host", fallback="0.0.0.0")  # noqa: S104 (Airflow's default, only read)
    port = conf.getint("api", "port", fallback=8080)
    if host in ("0.0.0.0", "::", ""):  # noqa: S104
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def caller_api(request: Request, _user: Annotated[Any, Depends(get_user)]) -> AirflowApi:
    """The REST API as the logged-in caller (401/403 from ``get_user`` when there is no login)."""
    auth = request.headers.get("authorization", "")
    token = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get(COOKIE_NAME_JWT_TOKEN)
    return AirflowApi(_api_url(request), token)


Api = Annotated[AirflowApi, Depends(caller_api)]


def _configs() -> dict[str, Path]:
    """The campaigns the DAG files build: $AUTOEXP_CONFIGS, else config/ beside the DAGs folder."""
    dags_folder = Path(conf.get("core", "dags_folder")).expanduser().resolve()
    return {p.stem: p for p in config_paths(default_config_dir(dags_folder))}


def _config(stem: str) -> Path:
    path = _configs().get(stem)
    if path is None:
        raise HTTPException(404, f"no campaign {stem!r} (configs: {', '.join(_configs()) or 'none'})")
    return path


def _api_error(exc: ApiError) -> HTTPException:
    return HTTPException(exc.status if exc.status in (401, 403, 404) else 502, str(exc))


class TriggerBody(BaseModel):
    """A slice as the page's form sends it: picked values per axis, free-text filters, wait."""

    filters: dict[str, list[str]] = {}
    text: str = ""
    wait: bool = False
    dry_run: bool = False


app = FastAPI(title="autoexp campaigns", docs_url=None, redoc_url=None, openapi_url=None)


@app.get("/", response_class=HTMLResponse)
def campaigns_page(_api: Api) -> str:
    return CAMPAIGNS_PAGE


@app.get("/experiment/{dag_id}/{run_id}", response_class=HTMLResponse)
def experiment_page(dag_id: str, run_id: str, _api: Api) -> str:
    return EXPERIMENT_PAGE


@app.get("/api/campaigns")
def list_campaigns(_api: Api) -> list[dict[str, str]]:
    return [{"campaign": stem, "config": str(path)} for stem, path in _configs().items()]


@app.get("/api/campaigns/{stem}")
def campaign(stem: str, api: Api) -> dict[str, Any]:
    path = _config(stem)
    try:
        return cv.campaign_view(path, api)
    except ApiError as exc:
        raise _api_error(exc) from None
    except config_errors() as exc:
        raise HTTPException(422, str(exc)) from None


@app.get("/api/campaigns/{stem}/plots/{name}")
def campaign_plot(stem: str, name: str, _api: Api) -> FileResponse:
    _config(stem)
    path = cv.report_dir(stem) / name
    if not cv.plot_name_ok(name) or not path.is_file():
        raise HTTPException(404, f"no plot {name!r} in {path.parent}")
    return FileResponse(path, media_type="image/png")


@app.post("/api/campaigns/{stem}/trigger")
def trigger(stem: str, body: TriggerBody, api: Api) -> dict[str, Any]:
    """Trigger the campaign's trigger DAG with the slice; its select task decides what runs."""
    path = _config(stem)
    try:
        cs.parse_filter_text(body.text)  # a malformed filter is refused here, not in a failed run
    except cs.SliceError as exc:
        raise HTTPException(422, str(exc)) from None
    conf: dict[str, Any] = {**body.filters, "filters": body.text, "wait": body.wait, "dry_run": body.dry_run}
    dag_id = cs.campaign_dag_id(path)
    try:
        run = api.trigger(dag_id, conf)
    except ApiError as exc:
        raise _api_error(exc) from None
    return {"dag_id": dag_id, "run_id": run["dag_run_id"], "url": cv.run_url(dag_id, run["dag_run_id"])}


@app.get("/api/experiments/{dag_id}/{run_id}")
def experiment(dag_id: str, run_id: str, api: Api) -> dict[str, Any]:
    try:
        return cv.experiment_view(api, dag_id, run_id)
    except ApiError as exc:
        raise _api_error(exc) from None


@app.get("/api/experiments/{dag_id}/{run_id}/plots/{name}")
def experiment_plot(dag_id: str, run_id: str, name: str, api: Api) -> FileResponse:
    try:
        path = cv.experiment_plot(api, dag_id, run_id, name)
    except ApiError as exc:
        raise _api_error(exc) from None
    if path is None:
        raise HTTPException(404, f"no plot {name!r} in the report of {dag_id} run {run_id}")
    return FileResponse(path, media_type="image/png")
