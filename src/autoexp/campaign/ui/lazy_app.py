"""What the plugin file registers: the app's URL prefix and an ASGI app that imports the real one
(FastAPI, Airflow's API-server modules) at its first request.

Airflow loads every plugin in every process that renders a task's context, every task included;
importing the FastAPI app there cost each task start 2.7-3.6 s on the 2-core test machine. Only
the API server ever calls this app, so only it pays the import.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

URL_PREFIX = "/campaigns"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyApp:
    """An ASGI app standing for ``autoexp.campaign.ui.app.app``, imported when first called."""

    def __init__(self) -> None:
        self._app: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            from autoexp.campaign.ui.app import app

            self._app = app
        await self._app(scope, receive, send)


app = LazyApp()
