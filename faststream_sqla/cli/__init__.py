"""`faststream-sqla` command line: the schema (`db`), the running queues, and publishing."""

from __future__ import annotations

from . import control, db, operate, publish  # noqa: F401 - each registers its commands on the app
from .common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
