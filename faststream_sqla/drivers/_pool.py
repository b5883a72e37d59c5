"""Returning a pooled connection the broker used below SQLAlchemy's `Connection`.

The one place the package touches SQLAlchemy's pool internals (`_close_special`, a
connection's `_pool`); the test in tests/drivers/test_pool_adapter.py fails loudly if an
upgrade changes them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.pool.base import _ConnectionFairy
from sqlalchemy.util import greenlet_spawn

# Checks a connection in as already reset: what SQLAlchemy's own `Connection.close()`
# does after its transaction ended. Looked up at import so a SQLAlchemy that renames
# it breaks loudly here, not silently on every check-in.
_check_in_reset = _ConnectionFairy._close_special


def _pool_keeps_it(fairy: Any) -> bool:
    """Whether the connection's pool has room for it back, so checking it in closes
    nothing. Only a queue pool says (an idle connection per slot of its size); any
    other pool is assumed full."""
    pool = fairy._pool
    checked_in, size = getattr(pool, "checkedin", None), getattr(pool, "size", None)
    return checked_in is not None and size is not None and checked_in() < size()


async def check_in(fairy: Any, *, transaction_ended: bool) -> None:
    """Give the connection back to the pool.

    When our own work ended its transaction (COMMIT or ROLLBACK, or asyncpg's
    statement-level commit), the pool's rollback-on-return has nothing to do, yet costs
    a round trip on asyncmy and a hand-off to the driver's thread on aiosqlite: it is
    skipped. Otherwise the usual check-in, whose rollback ends whatever is still open.

    Either way it runs in SQLAlchemy's greenlet context: when the pool is already full
    the connection is closed instead of kept, and closing an async driver's connection
    awaits. Outside that context the close failed (`MissingGreenlet`), SQLAlchemy only
    logged it, and the server connection stayed open for good.
    """
    if transaction_ended:
        if _pool_keeps_it(fairy):
            # the common case: nothing to close, so no greenlet to start (one per claim,
            # outcome flush and publish)
            _check_in_reset(fairy, transaction_reset=True)
        else:
            await greenlet_spawn(_check_in_reset, fairy, transaction_reset=True)
    else:
        await greenlet_spawn(fairy.close)
