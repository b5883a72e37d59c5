"""`faststream-sqla` command line: the schema (`db`), the running queues and the limits
of their channels, publishing, and the schedules."""

from __future__ import annotations

from . import (  # noqa: F401 - each registers its commands
    channels,
    control,
    dashboard,
    db,
    operate,
    publish,
    report,
    schedule,
)
from .common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
