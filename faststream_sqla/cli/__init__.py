"""`faststream-sqla` command line: the schema (`db`), the running queues and the limits
of their channels, publishing, the schedules, the
topics' bindings, and the webhook endpoints and their delivery."""

from __future__ import annotations

from . import (  # noqa: F401 - each registers its commands
    channels,
    control,
    dashboard,
    db,
    endpoint,
    operate,
    publish,
    report,
    schedule,
    topic,
    webhooks,
)
from .common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
