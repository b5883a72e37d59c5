"""Returning a pooled connection the broker used below SQLAlchemy's `Connection`."""

from __future__ import annotations

from typing import Any

from sqlalchemy.util import greenlet_spawn


async def check_in(fairy: Any, *, transaction_ended: bool) -> None:
    """Give the connection back to the pool.

    When our own work ended its transaction (COMMIT or ROLLBACK, or asyncpg's
    statement-level commit), the pool's rollback-on-return has nothing to do, yet costs
    a round trip on asyncmy and a hand-off to the driver's thread on aiosqlite: it is
    skipped through SQLAlchemy's
    private `_close_special`, where present. Otherwise the usual check-in, whose
    rollback ends whatever is still open (it needs the greenlet context for that).
    """
    close_special = getattr(fairy, "_close_special", None)
    if transaction_ended and close_special is not None:
        close_special(transaction_reset=True)
    else:
        await greenlet_spawn(fairy.close)
