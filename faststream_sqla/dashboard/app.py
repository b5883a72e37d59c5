"""`create_app`: the dashboard as an ASGI app, served by `faststream-sqla dashboard` or
mounted in a user's own FastAPI or Starlette app. The JSON API lives under /api
(OpenAPI at /api/openapi.json); the pages, their templates and static files are
shipped in this package beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from pathlib import Path

import sqlalchemy as sa
from fastapi import Depends, FastAPI
from fastapi.staticfiles import StaticFiles
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.admin.api import DEFAULT_READ_TIMEOUT
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.urls import masked

from .api import API_ROUTERS
from .auth import BasicAuth, DashboardAuth, TokenAuth
from .errors import ERROR_RESPONSES, install_error_handlers
from .pages import error_page, install_pages
from .settings import DashboardSettings, authorised

#: the package's static files (styles, htmx, the pages' script)
STATIC = Path(__file__).parent / "static"


def _version() -> str:
    try:
        return metadata.version("faststream-sqla")
    except metadata.PackageNotFoundError:  # a source tree not installed
        return "unknown"


def _admin(
    target: QueueAdmin | AsyncEngine | str | sa.URL,
    read_url: AsyncEngine | str | sa.URL | None,
    read_timeout: float | None,
) -> tuple[QueueAdmin, bool]:
    """The admin API to serve, and whether the app made it (and closes it)."""
    if isinstance(target, QueueAdmin):
        for name, value in (("read_url", read_url), ("read_timeout", read_timeout)):
            if value is not None:
                msg = f"give {name} to the QueueAdmin passed to create_app, not to create_app"
                raise InvalidOptionError(msg)
        return target, False
    if isinstance(target, AsyncEngine | str | sa.URL):
        timeout = DEFAULT_READ_TIMEOUT if read_timeout is None else read_timeout
        return QueueAdmin(target, read_url=read_url, read_timeout=timeout), True
    msg = f"create_app takes a database URL, an AsyncEngine or a QueueAdmin, got {shown(target)}"
    raise InvalidOptionError(msg)


def create_app(
    target: QueueAdmin | AsyncEngine | str | sa.URL,
    *,
    read_only: bool = False,
    auth: DashboardAuth | None = None,
    read_url: AsyncEngine | str | sa.URL | None = None,
    read_timeout: float | None = None,
) -> FastAPI:
    """The dashboard of the queues in one database, as an ASGI app.

    Args:
        target: a database URL (the app makes an engine and closes it when its lifespan
            ends: mounted in another app, enter `app.router.lifespan_context(app)`
            from the parent's lifespan, since a mounted app's own does not run),
            an `AsyncEngine` or a `QueueAdmin` (yours: kept open; pass a `QueueAdmin`
            to choose the table names).
        read_only: refuse every change (403) and hide the pages' actions.
        auth: a `TokenAuth` or `BasicAuth`; None serves anyone who can reach it (on a
            loopback address only, as `faststream-sqla dashboard` enforces).
        read_url: a replica to read the figures from, with a URL or engine `target`
            (`QueueAdmin`'s `read_url`); the pages show its lag, and every change
            still goes to `target`, the primary.
        read_timeout: with a URL or engine `target`, the seconds (0.1 to 300, default
            5) each read may take: past it the API answers 503 and a page says the
            database did not answer in time, instead of waiting on a lock held
            elsewhere. Changes are never bound. A `QueueAdmin` target keeps its own
            `read_timeout`.
    """
    if auth is not None and not isinstance(auth, TokenAuth | BasicAuth):
        raise InvalidOptionError(f"auth is a TokenAuth or a BasicAuth, got {shown(auth)}")
    admin, owned = _admin(target, read_url, read_timeout)
    database = masked(admin.engine.url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        if owned:
            await admin.close()

    app = FastAPI(
        title="faststream-sqla dashboard",
        version=_version(),
        openapi_url="/api/openapi.json",
        docs_url="/api/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.dashboard = DashboardSettings(admin, read_only, auth, database)
    install_error_handlers(app, page_answer=error_page)
    for router in API_ROUTERS:
        app.include_router(
            router, prefix="/api", dependencies=[Depends(authorised)], responses=ERROR_RESPONSES
        )
    install_pages(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
