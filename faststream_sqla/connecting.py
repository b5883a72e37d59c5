"""An engine from a URL, and the first contact with its database: one wording, for the
broker, the migrations and the CLI, of the two errors of a first hour (a driver that is
not async, a database that does not answer)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from .dialects.base import reading
from .exceptions import DatabaseUnreachableError, InvalidOptionError
from .urls import mask_passwords, masked, parse_url

#: the async driver the tests run each database on
ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "mysql": "mysql+asyncmy",
    "mariadb": "mysql+asyncmy",
    "sqlite": "sqlite+aiosqlite",
}


def async_driver_advice(url: sa.URL) -> str:
    """What to write instead of a URL whose driver is not async (or not installed)."""
    drivername = ASYNC_DRIVERS.get(url.get_backend_name())
    if drivername is None:
        return "use postgresql+asyncpg://, mysql+asyncmy:// or sqlite+aiosqlite:///"
    return f"use the async driver: {masked(url.set(drivername=drivername))}"


def create_engine(url: str | sa.URL, **options: Any) -> AsyncEngine:
    """An async engine for `url`; InvalidOptionError (password masked) naming the async
    driver to use when the URL's driver is not async, unknown or not installed."""
    parsed = parse_url(url)
    try:
        return create_async_engine(parsed, **options)
    except (ImportError, sa.exc.ArgumentError, sa.exc.InvalidRequestError) as e:
        msg = f"invalid database URL {masked(parsed)}: {mask_passwords(str(e)).rstrip('.')}; "
        raise InvalidOptionError(msg + async_driver_advice(parsed)) from e


def unreachable(url: sa.URL, error: BaseException) -> DatabaseUnreachableError:
    """The error for a database at `url` that did not answer (`error` is the cause)."""
    reason = mask_passwords(str(error)) or type(error).__name__
    return DatabaseUnreachableError(f"cannot reach the database at {masked(url)}: {reason}")


async def ensure_reachable(engine: AsyncEngine) -> None:
    """Ask the database once; DatabaseUnreachableError (driver error chained) when it
    does not answer: no server, a wrong password, a missing database."""
    try:
        async with reading(engine) as conn:
            await conn.execute(sa.text("SELECT 1"))
    except Exception as e:
        raise unreachable(engine.url, e) from e
