"""The statements of ordering keys (faststream_sqla.ordering decides when they run):
hold a new keyed message WAITING behind an earlier one of its key, and release the
first of a key. The same SQLAlchemy Core on every database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.schema import MessageState, QueueTables

from ._claim import earlier_of_its_key, keyed_messages

#: ids per statement (the drivers bound the parameters of one)
IDS_PER_STATEMENT = 1000


class KeyHead(NamedTuple):
    """The first message of one ordering key."""

    ordering_key: str
    id: int


def _chunks(ids: Sequence[int]) -> list[Sequence[int]]:
    return [ids[i : i + IDS_PER_STATEMENT] for i in range(0, len(ids), IDS_PER_STATEMENT)]


async def hold_waiting(conn: AsyncConnection, tables: QueueTables, ids: Sequence[int]) -> list[int]:
    """Set WAITING those of `ids` that have an earlier message of their key; their ids."""
    m = tables.message
    waiting: list[int] = []
    for chunk in _chunks(ids):
        found = await conn.execute(
            sa.select(m.c.id).where(m.c.id.in_(chunk), earlier_of_its_key(tables))
        )
        waiting += found.scalars()
    for chunk in _chunks(waiting):
        await conn.execute(sa.update(m).where(m.c.id.in_(chunk)).values(state=MessageState.WAITING))
    return waiting


async def release_if_first(conn: AsyncConnection, tables: QueueTables, ids: Sequence[int]) -> int:
    """Release those of `ids` that wait and are first of their key; how many."""
    m = tables.message
    released = 0
    for chunk in _chunks(ids):
        found = await conn.execute(
            sa.select(m.c.id).where(
                m.c.id.in_(chunk),
                m.c.state == MessageState.WAITING,
                ~earlier_of_its_key(tables),
            )
        )
        released += await release_waiting(conn, m, list(found.scalars()))
    return released


async def key_heads(
    conn: AsyncConnection, tables: QueueTables, queue: str, after: str, limit: int
) -> list[KeyHead]:
    """The first message of each of `queue`'s next `limit` keys after `after`, in key
    order."""
    k = keyed_messages(tables)
    rows = await conn.execute(
        sa.select(k.keys.c.ordering_key, sa.func.min(k.keys.c.id))
        .select_from(k.source)
        .where(k.keys.c.queue == queue, k.keys.c.ordering_key > after)
        .group_by(k.keys.c.ordering_key)
        .order_by(k.keys.c.ordering_key)
        .limit(limit)
    )
    return [KeyHead(key, first) for key, first in rows]


async def release_waiting(conn: AsyncConnection, m: sa.Table, ids: list[int]) -> int:
    """Make PENDING those of `ids` that are WAITING; how many."""
    if not ids:
        return 0
    result = await conn.execute(
        sa.update(m)
        .where(m.c.id.in_(ids), m.c.state == MessageState.WAITING)
        .values(state=MessageState.PENDING)
    )
    return result.rowcount or 0
