"""Returning a pooled connection the broker used below SQLAlchemy's `Connection`.

The one place the package touches SQLAlchemy's pool internals (`_close_special`); the
test in tests/drivers/test_pool_adapter.py fails loudly if an upgrade changes it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.pool.base import _ConnectionFairy
from sqlalchemy.util import greenlet_spawn

# Checks a connection in as already reset: what SQLAlchemy's own `Connection.close()`
# does after its transaction ended. Looked up at import so a SQLAlchemy that renames
# it breaks loudly here, not silently on every check-in.
_check_in_reset = _ConnectionFairy._close_special


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
        await greenlet_spawn(_check_in_reset, fairy, transaction_reset=True)
    else:
        await greenlet_spawn(fairy.close)
