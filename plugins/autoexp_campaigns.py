"""Airflow plugin: the "Campaigns" page and each experiment run's "Campaign" tab (autoexp.campaign.ui)."""

from airflow.plugins_manager import AirflowPlugin

# Light: every task process loads every plugin; the FastAPI app is imported at its first request.
from autoexp.campaign.ui.lazy_app import URL_PREFIX, app


class AutoexpCampaignsPlugin(AirflowPlugin):
    """Registers the FastAPI app at /campaigns and two external views (iframes) in the UI."""

    name = "autoexp_campaigns"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "autoexp campaigns"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {"name": "Campaigns", "href": f"{URL_PREFIX}/", "destination": "nav", "url_route": "campaigns"},
        {
            "name": "Campaign",
            "href": f"{URL_PREFIX}/experiment/{{DAG_ID}}/{{RUN_ID}}",
            "destination": "dag_run",
            "url_route": "campaign_run",
        },
    ]
