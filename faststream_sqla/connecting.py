"""An engine from a URL, and the first contact with its database: one wording, for the
broker, the migrations and the CLI, of the two errors of a first hour (a driver that is
not async, a database that does not answer)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import QueuePool

from .drivers.base import reading
from .drivers.probe import select_one
from .exceptions import DatabaseUnreachableError, InvalidOptionError
from .urls import mask_passwords, masked, parse_url

#: the async driver the tests run each database on
ASYNC_DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "mysql": "mysql+asyncmy",
    "mariadb": "mysql+asyncmy",
    "sqlite": "sqlite+aiosqlite",
}


#: the extra of this package that installs each async driver (`pip install "...[extra]"`)
DRIVER_EXTRAS = {"asyncpg": "postgres", "asyncmy": "mysql"}


def install_advice(driver: str) -> str:
    """How to install an async driver this package knows, else how to install `driver`."""
    extra = DRIVER_EXTRAS.get(driver)
    if extra is None:
        return f"pip install {driver}"
    return f'pip install "faststream-sqla[{extra}]"'


def installed(module: str) -> bool:
    """Whether `module` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: blocked by a None in sys.modules
        return False


def async_driver_advice(url: sa.URL) -> str:
    """What to write instead of a URL whose driver is not async (or not installed)."""
    drivername = ASYNC_DRIVERS.get(url.get_backend_name())
    if drivername is None:
        return "use postgresql+asyncpg://, mysql+asyncmy:// or sqlite+aiosqlite:///"
    advice = f"use the async driver: {masked(url.set(drivername=drivername))}"
    driver = drivername.partition("+")[2]
    if not installed(driver):
        advice += f", after installing it: {install_advice(driver)}"
    return advice


#: asyncpg's statement cache, as a URL query parameter (docs/production.md#connection-poolers)
STATEMENT_CACHE_SIZE = "statement_cache_size"


def _statement_cache_option(url: sa.URL, options: dict[str, Any]) -> None:
    """`?statement_cache_size=N` of an asyncpg URL given to asyncpg as a number, in
    `options["connect_args"]`.

    SQLAlchemy hands unknown query parameters to asyncpg's `connect()` as text, which
    asyncpg refuses for this one. A pooler in transaction mode needs it 0, and then
    SQLAlchemy's own cache of prepared statements off too: a cached statement would run
    again on whichever server connection the pooler hands out next. Arguments given in
    `connect_args` win over the URL's.
    """
    if url.get_driver_name() != "asyncpg" or STATEMENT_CACHE_SIZE not in url.query:
        return
    given = url.query[STATEMENT_CACHE_SIZE]
    try:
        size = int(given if isinstance(given, str) else given[-1])
        if size < 0:
            raise ValueError(size)
    except ValueError:
        msg = f"{STATEMENT_CACHE_SIZE} in the URL must be a whole number >= 0, got {given!r}"
        raise InvalidOptionError(msg) from None
    cache = {STATEMENT_CACHE_SIZE: size}
    if size == 0 and "prepared_statement_cache_size" not in url.query:
        cache["prepared_statement_cache_size"] = 0
    # connect_args take precedence over the URL's text, which stays in the URL so that
    # the commands the broker suggests (`db upgrade --url ...`) keep the option
    options["connect_args"] = {**cache, **options.get("connect_args", {})}


def create_engine(url: str | sa.URL, **options: Any) -> AsyncEngine:
    """An async engine for `url`; InvalidOptionError (password masked) naming the async
    driver to use when the URL's driver is not async or unknown, and the extra to install
    when the URL names the right driver but it is not installed.

    On asyncpg, `?statement_cache_size=0` turns off prepared statement caches, for a
    pooler in transaction mode (`_statement_cache_option`)."""
    parsed = parse_url(url)
    _statement_cache_option(parsed, options)
    try:
        engine = create_async_engine(parsed, **options)
        if "pool_use_lifo" in options or not isinstance(engine.sync_engine.pool, QueuePool):
            return engine
        # The connection checked in last is handed out first: a busy consumer keeps
        # using the same few connections, whose prepared statements (SQLite's per-text
        # cache, asyncpg's) are warm, where a queue of them would rotate through every
        # connection the pool ever opened and prepare each statement on each. The first
        # engine has opened nothing yet.
        return create_async_engine(parsed, **options, pool_use_lifo=True)
    except ImportError as e:
        if parsed.drivername in ASYNC_DRIVERS.values() and e.name:
            # the URL is right: only the package is missing
            msg = (
                f"the {parsed.get_driver_name()} driver of {masked(parsed)} is not installed "
                f"(no module named {e.name!r}); install it: {install_advice(e.name)}"
            )
            raise InvalidOptionError(msg) from e
        reason = mask_passwords(str(e)).rstrip(".")
        msg = f"invalid database URL {masked(parsed)}: {reason}; {async_driver_advice(parsed)}"
        raise InvalidOptionError(msg) from e
    except (sa.exc.ArgumentError, sa.exc.InvalidRequestError) as e:
        msg = f"invalid database URL {masked(parsed)}: {mask_passwords(str(e)).rstrip('.')}; "
        raise InvalidOptionError(msg + async_driver_advice(parsed)) from e


def missing_sqlite_file(url: sa.URL) -> Path | None:
    """The file a SQLite URL names, if it does not exist (connecting would create it)."""
    if url.get_backend_name() != "sqlite" or url.query.get("uri") or url.query.get("mode"):
        return None
    if not url.database or url.database == ":memory:" or url.database.startswith("file:"):
        return None
    path = Path(url.database)
    return None if path.exists() else path.resolve()


def unreachable(url: sa.URL, error: BaseException) -> DatabaseUnreachableError:
    """The error for a database at `url` that did not answer (`error` is the cause)."""
    # the driver's own words: SQLAlchemy's wrapper adds the statement and a link line
    cause = error.orig if isinstance(error, sa.exc.DBAPIError) and error.orig else error
    reason = mask_passwords(str(cause)) or type(cause).__name__
    return DatabaseUnreachableError(f"cannot reach the database at {masked(url)}: {reason}")


async def ensure_reachable(engine: AsyncEngine) -> None:
    """Ask the database once; DatabaseUnreachableError (driver error chained) when it
    does not answer: no server, a wrong password, a missing database."""
    try:
        async with reading(engine) as conn:
            await select_one(conn)
    except Exception as e:
        raise unreachable(engine.url, e) from e
