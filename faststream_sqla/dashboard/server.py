"""Serving the dashboard on its own (`faststream-sqla dashboard`): where it may listen
without auth, the app served under a base path, and the admin API it made closed when
it stops."""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp

from faststream_sqla.admin import QueueAdmin
from faststream_sqla.exceptions import InvalidOptionError, shown

from .app import create_app
from .auth import DashboardAuth

#: names that are loopback addresses whatever the resolver says
LOOPBACK_NAMES = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, auth: DashboardAuth | None) -> None:
    """InvalidOptionError when the dashboard would listen beyond this machine without
    auth: anyone who can reach it could purge and redrive."""
    if auth is None and not is_loopback(host):
        msg = (
            f"the dashboard will not listen on {shown(host)} without auth: set a token "
            "(--token or FASTSTREAM_SQLA_DASHBOARD_TOKEN) or basic auth "
            "(--basic-user and --basic-password), or listen on 127.0.0.1"
        )
        raise InvalidOptionError(msg)


def base_path_of(path: str) -> str:
    """`path` as a mount point: "" for the root, else "/a/b" (no trailing slash)."""
    cleaned = "/" + path.strip("/")
    if cleaned == "/":
        return ""
    if not all(part and part.isprintable() and " " not in part for part in cleaned[1:].split("/")):
        raise InvalidOptionError(f"not a base path: {shown(path)} (e.g. /queues)")
    return cleaned


def under_base_path(app: FastAPI, base_path: str) -> ASGIApp:
    """`app` served under `base_path` (the app as it is for ""), its start-up and
    shut-down still run (a mounted app's own are not)."""
    if not base_path:
        return app

    @asynccontextmanager
    async def lifespan(parent: Starlette) -> AsyncIterator[None]:
        async with app.router.lifespan_context(app):
            yield

    return Starlette(routes=[Mount(base_path, app=app)], lifespan=lifespan)


def served_app(
    admin: QueueAdmin, *, read_only: bool, auth: DashboardAuth | None, base_path: str
) -> ASGIApp:
    """The dashboard of `admin` as the command serves it: under `base_path`, and
    `admin`'s engines closed when the server stops (the command made them; the
    dashboard leaves a `QueueAdmin` it was given open)."""
    app = create_app(admin, read_only=read_only, auth=auth)
    started = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(served: FastAPI) -> AsyncIterator[None]:
        try:
            async with started(served):
                yield
        finally:
            await admin.close()

    app.router.lifespan_context = lifespan
    return under_base_path(app, base_path)
