"""The dashboard: a web view of the queues over `QueueAdmin` (docs/dashboard.md).

Needs the `dashboard` extra: `pip install "faststream-sqla[dashboard]"`."""

from .app import create_app
from .auth import BasicAuth, DashboardAuth, TokenAuth

__all__ = ["BasicAuth", "DashboardAuth", "TokenAuth", "create_app"]
