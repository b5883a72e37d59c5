"""The statements that ask the database itself rather than a table, the same on every
database: whether it answers, and its clock."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now


async def select_one(conn: AsyncConnection) -> None:
    """`SELECT 1`: raises the driver's error when the database does not answer."""
    await conn.execute(sa.text("SELECT 1"))


async def database_now(conn: AsyncConnection) -> datetime:
    """The database clock, naive UTC: every process judges "due" by the same time."""
    value = await conn.scalar(sa.select(utc_now()))
    if isinstance(value, str):  # SQLite's text
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=None)
