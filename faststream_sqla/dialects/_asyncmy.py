"""MySQL/MariaDB transactions run on the pool's asyncmy connection itself.

Through SQLAlchemy's `Connection`, every one of the broker's own transactions ended with
an extra round trip: the pool rolls back each connection it gets back, and on asyncmy
that is a `ROLLBACK` sent to the server even after a `COMMIT` (the server counted 100
`INSERT`, 100 `COMMIT` and 101 `ROLLBACK` over 100 publishes). Here a transaction that
committed is checked in as already reset; one that failed is checked in the usual way,
whose rollback ends it. Errors come out as SQLAlchemy's exceptions, classed by the
driver's PEP 249 class, as SQLAlchemy itself does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Any

import asyncmy.errors
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ._pool import check_in


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a driver error or of SQLAlchemy's wrapper of one."""
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


@asynccontextmanager
async def driver_transaction(
    engine: AsyncEngine, *, read_committed: bool, disconnect_codes: Collection[int]
) -> AsyncIterator[Any]:
    """An asyncmy cursor in a transaction of its own, committed on exit.

    `read_committed` sets that level for this transaction only. A connection lost
    (an error numbered in `disconnect_codes`) or interrupted mid-statement by
    cancellation is invalidated, so the pool never hands it out again.
    """
    fairy = await engine.raw_connection()
    driver = fairy.driver_connection
    if driver is None:  # only on a connection SQLAlchemy has already closed
        raise sa.exc.ResourceClosedError("the pool handed out a closed connection")
    reset = False  # the transaction is over: no rollback needed at check-in
    try:
        async with driver.cursor() as cursor:
            if read_committed:
                await cursor.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
            yield cursor
        await driver.commit()
        reset = True
    except Exception as exc:
        lost = error_code(exc) in disconnect_codes
        if lost:
            fairy.invalidate(exc)
        else:
            # ended here, not left to the pool's reset on return, which an engine may
            # turn off (pool_reset_on_return=None): the next user of the connection
            # would commit what this transaction wrote before it failed
            reset = await _rolled_back(fairy, driver)
        if isinstance(exc, asyncmy.errors.Error):
            raise sa.exc.DBAPIError.instance(
                None,
                None,
                exc,
                asyncmy.errors.Error,
                connection_invalidated=lost,
                dialect=engine.dialect,
            ) from exc
        raise
    except BaseException:
        fairy.invalidate()
        raise
    finally:
        await check_in(fairy, transaction_ended=reset)


async def _rolled_back(fairy: Any, driver: Any) -> bool:
    """Roll back a failed transaction; a connection that cannot is dropped."""
    try:
        await driver.rollback()
    except Exception as exc:
        fairy.invalidate(exc)
        return False
    return True
