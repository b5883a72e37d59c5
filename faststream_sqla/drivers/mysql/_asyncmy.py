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

from collections.abc import Collection
from typing import Any

import asyncmy.errors
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from .._pool import check_in


def error_code(exc: BaseException) -> int | None:
    """The MySQL error number of a driver error or of SQLAlchemy's wrapper of one."""
    orig = getattr(exc, "orig", None) or exc
    args = getattr(orig, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


class DriverTransaction:
    """An asyncmy cursor in a transaction of its own, committed on exit
    (`async with DriverTransaction(engine, ...) as transaction`).

    `read_committed` sets that level for this transaction only, in the packet of its
    first statement (`_ReadCommittedCursor`), not a round trip of its own. A statement packet that
    ends with its own COMMIT saves the round trip of the commit on exit: the caller then
    sets `ended`. A connection lost (an error numbered in `disconnect_codes`) or
    interrupted mid-statement by cancellation is invalidated, so the pool never hands
    it out again. It may be entered in one task and left in another (a claim's read
    ahead of its write).
    """

    def __init__(
        self, engine: AsyncEngine, *, read_committed: bool, disconnect_codes: Collection[int]
    ) -> None:
        self.engine = engine
        self.read_committed = read_committed
        self.disconnect_codes = disconnect_codes
        #: the cursor, once entered
        self.cursor: Any = None
        #: set by a caller whose last statement packet committed the transaction
        self.ended = False
        self._fairy: Any = None
        self._driver: Any = None

    async def __aenter__(self) -> DriverTransaction:
        fairy = await self.engine.raw_connection()
        native = fairy.driver_connection
        if native is None:  # only on a connection SQLAlchemy has already closed
            raise sa.exc.ResourceClosedError("the pool handed out a closed connection")
        self._fairy, self._native = fairy, native
        cursor = native.cursor()
        self.cursor = _ReadCommittedCursor(cursor) if self.read_committed else cursor
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        fairy, native = self._fairy, self._native
        reset = False  # the transaction is over: no rollback needed at check-in
        try:
            if exc is None:
                try:
                    await self.cursor.close()
                    if not self.ended:
                        await native.commit()
                    reset = True
                except BaseException as failed:
                    reset = await self._failed(failed)
                    raise self._translated(failed) from failed
            else:
                reset = await self._failed(exc)
                translated = self._translated(exc)
                if translated is not exc:
                    raise translated from exc
        finally:
            await check_in(fairy, transaction_ended=reset)

    async def _failed(self, exc: BaseException) -> bool:
        """End a failed transaction; whether the connection may be reused as reset."""
        fairy, native = self._fairy, self._native
        if not isinstance(exc, Exception):  # cancelled mid-statement: state unknown
            fairy.invalidate()
            return False
        if error_code(exc) in self.disconnect_codes:
            fairy.invalidate(exc)
            return False
        # ended here, not left to the pool's reset on return, which an engine may turn
        # off (pool_reset_on_return=None): the next user of the connection would commit
        # what this transaction wrote before it failed
        return await _rolled_back(fairy, native)

    def _translated(self, exc: BaseException) -> BaseException:
        """A driver error as SQLAlchemy's exception, classed by the driver's PEP 249
        class, as SQLAlchemy itself does; anything else as it is."""
        if not isinstance(exc, asyncmy.errors.Error):
            return exc
        return sa.exc.DBAPIError.instance(
            None,
            None,
            exc,
            asyncmy.errors.Error,
            connection_invalidated=error_code(exc) in self.disconnect_codes,
            dialect=self.engine.dialect,
        )


#: sent ahead of a transaction's first statement, in the same packet
READ_COMMITTED = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; "


class _ReadCommittedCursor:
    """An asyncmy cursor whose first statement goes in one packet with the SET
    TRANSACTION that must precede it: an idle claim (the SET, an empty locking read,
    the COMMIT) is then two round trips, not three, and so is every claim, outcome
    write and lease renewal. After the first statement it is the cursor itself, as
    the caller sees it: its result, its row count, its next result sets."""

    __slots__ = ("_cursor", "_first")

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self._first = True

    async def execute(self, query: str, args: Any = None) -> Any:
        if not self._first:
            return await self._cursor.execute(query, args)
        self._first = False
        cursor = self._cursor
        await cursor.execute(READ_COMMITTED + query, args)
        await cursor.nextset()  # past the SET's result, to the statement's own
        return cursor.rowcount

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


async def _rolled_back(fairy: Any, native: Any) -> bool:
    """Roll back a failed transaction; a connection that cannot is dropped."""
    try:
        await native.rollback()
    except Exception as exc:
        fairy.invalidate(exc)
        return False
    return True
