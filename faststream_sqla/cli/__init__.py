"""`faststream-sqla` command line: the schema (`db`) and the running queues."""

from __future__ import annotations

from . import db, operate, report  # noqa: F401 - each registers its commands on the app
from .common import app


def main() -> None:
    app()


__all__ = ["app", "main"]
