"""PostgreSQL statements run on the pool's asyncpg connection itself.

Through SQLAlchemy's `Connection`, a one-statement autocommit operation costs a
checkout, the isolation level set and reset, and four greenlet hops around one round
trip; on the driver, pool checkout included, it costs about half the client CPU
(docs/benchmarks.md#postgresql-driver-route). Claims and outcome writes (once
per batch on the consume path) and committed publishes go this way; everything else keeps
SQLAlchemy's connection.

asyncpg opens no transaction by itself: each statement commits on its own, which is
what these one-statement operations want. Errors come out as SQLAlchemy's, classed as
SQLAlchemy's own asyncpg driver classes them, so callers catch one family of
exceptions whichever route a statement took.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .._pool import check_in

# asyncpg's exception classes, most specific first, and the SQLAlchemy class each
# becomes: the same classing SQLAlchemy's asyncpg driver applies.
_SQLALCHEMY_CLASSES: tuple[tuple[type[BaseException], type[sa.exc.DBAPIError]], ...] = (
    (asyncpg.exceptions.IntegrityConstraintViolationError, sa.exc.IntegrityError),
    (asyncpg.exceptions.SyntaxOrAccessError, sa.exc.ProgrammingError),
    (asyncpg.exceptions.InternalServerError, sa.exc.InternalError),
    (asyncpg.exceptions.InterfaceError, sa.exc.InterfaceError),
    (asyncpg.exceptions.InternalClientError, sa.exc.InternalError),
    (asyncpg.exceptions.PostgresError, sa.exc.DBAPIError),
    (ConnectionError, sa.exc.OperationalError),  # the socket itself failed
)


def as_sqlalchemy_error(exc: Exception, *, lost: bool) -> Exception:
    """The SQLAlchemy exception for a driver error (`exc` itself if not one). `lost`
    marks it `connection_invalidated`, as SQLAlchemy does for a lost connection."""
    for driver_class, sqlalchemy_class in _SQLALCHEMY_CLASSES:
        if isinstance(exc, driver_class):
            return sqlalchemy_class(None, None, exc, connection_invalidated=lost)
    return exc


@asynccontextmanager
async def driver_connection(engine: AsyncEngine) -> AsyncIterator[Any]:
    """A pooled connection's asyncpg connection, checked in again afterwards.

    A connection left closed by an error, or interrupted mid-statement by cancellation
    (its protocol state is then unknown), is invalidated, so the pool never hands it out
    again and a retry gets a fresh one.
    """
    fairy = await engine.raw_connection()
    native = fairy.driver_connection
    if native is None:  # only on a connection SQLAlchemy has already closed
        raise sa.exc.ResourceClosedError("the pool handed out a closed connection")
    interrupted = False
    try:
        yield native
    except Exception as exc:
        lost = native.is_closed()
        if lost:
            fairy.invalidate(exc)
        translated = as_sqlalchemy_error(exc, lost=lost)
        if translated is exc:
            raise
        raise translated from exc
    except BaseException:
        interrupted = True
        fairy.invalidate()
        raise
    finally:
        # Each statement commits on its own and a transaction block ends with its
        # context, so, as on the other driver routes, the pool's reset is skipped.
        await check_in(fairy, transaction_ended=not interrupted)
