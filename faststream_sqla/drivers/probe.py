"""The one statement that asks whether a database answers, the same on every database."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection


async def select_one(conn: AsyncConnection) -> None:
    """`SELECT 1`: raises the driver's error when the database does not answer."""
    await conn.execute(sa.text("SELECT 1"))
