"""What one dashboard app serves and how: the admin API it reads and changes through,
whether it is read-only, who may use it. Kept on the app's state for the routes."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.requests import Request

from faststream_sqla.admin import QueueAdmin

from .auth import DashboardAuth, check_request
from .errors import Refused


@dataclass(frozen=True)
class DashboardSettings:
    admin: QueueAdmin
    read_only: bool
    auth: DashboardAuth | None
    #: the database as it may be shown: its URL with the password masked
    database: str


def settings_of(request: Request) -> DashboardSettings:
    settings: DashboardSettings = request.app.state.dashboard
    return settings


def admin_of(request: Request) -> QueueAdmin:
    """The routes' dependency: the admin API, once the request may go on."""
    return settings_of(request).admin


def authorised(request: Request) -> None:
    """Every API route's dependency: refused unless its credentials are right."""
    check_request(request, settings_of(request).auth)


def changes_allowed(request: Request) -> None:
    """Every POST and PUT route's dependency: refused (403) in read-only mode."""
    if settings_of(request).read_only:
        raise Refused(403, "this dashboard is read-only: it changes nothing")
