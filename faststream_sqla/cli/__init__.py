"""`faststream-sqla` command line: the schema (`db`), the running queues, publishing, and
the schedules."""

from __future__ import annotations

from . import control, db, operate, publish, report, schedule  # noqa: F401 - each registers its commands
from .common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
