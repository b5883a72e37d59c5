"""Ordering keys: a key's later messages wait outside the claim index until their turn.

A message published while an earlier message of its key is still in the table is
stored as WAITING, a state the claim index leaves out, so claims never walk a deep
key's backlog. It becomes PENDING when it is the first of its key again, released by:

- the consumer that archives the message before it (`release_next`, a statement of its
  own right after the archive commits);
- its publisher, right after the publish commits (`release_first`): a publish that
  raced with that archive saw the earlier message and waited, while the archive's
  release could not yet see the new row. Whichever of the two statements starts last
  sees both commits, so one of them releases it;
- a sweep in every consumer's release-stuck pass (`sweep`), for a process that died
  between a commit and its release: it looks at the first message of a bounded number
  of keys per pass, round the queue's keys.

WAITING is an optimisation of where the claim looks, not what keeps the order: the
claim still passes over a message while an earlier one of its key is in the table
(`drivers._claim.first_of_its_key`), so a message released early, or published
PENDING by a racing publisher, is never handled out of turn.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.drivers._claim import earlier_of_its_key, keyed_messages
from faststream_sqla.schema import MessageState

if TYPE_CHECKING:
    from faststream_sqla.drivers import Driver
    from faststream_sqla.drivers.base import NewMessage

#: ids per statement (the drivers bound the parameters of one)
IDS_PER_STATEMENT = 1000
#: keys a sweep looks at per queue and pass
KEYS_PER_SWEEP = 500


def has_ordering_keys(rows: Sequence[NewMessage]) -> bool:
    return any(row.ordering_key is not None for row in rows)


def _chunks(ids: Sequence[int]) -> list[Sequence[int]]:
    return [ids[i : i + IDS_PER_STATEMENT] for i in range(0, len(ids), IDS_PER_STATEMENT)]


async def hold_behind_keys(
    driver: Driver, conn: AsyncConnection, rows: Sequence[NewMessage], ids: Sequence[int]
) -> list[int]:
    """In the publishing transaction, after the insert: set WAITING the new keyed
    messages that have an earlier message of their key; returns their ids."""
    m = driver.tables.message
    keyed = [i for row, i in zip(rows, ids, strict=True) if row.ordering_key is not None]
    waiting: list[int] = []
    for chunk in _chunks(keyed):
        found = await conn.execute(
            sa.select(m.c.id).where(m.c.id.in_(chunk), earlier_of_its_key(driver.tables))
        )
        waiting += found.scalars()
    for chunk in _chunks(waiting):
        await conn.execute(sa.update(m).where(m.c.id.in_(chunk)).values(state=MessageState.WAITING))
    return waiting


async def release_first(driver: Driver, engine: AsyncEngine, ids: Sequence[int]) -> int:
    """After the publish committed: release those of `ids` that are first of their key."""
    m = driver.tables.message
    released = 0
    async with driver.own_transaction(engine) as conn:
        for chunk in _chunks(ids):
            found = await conn.execute(
                sa.select(m.c.id).where(
                    m.c.id.in_(chunk),
                    m.c.state == MessageState.WAITING,
                    ~earlier_of_its_key(driver.tables),
                )
            )
            released += await _release(conn, m, list(found.scalars()))
    return released


async def release_next(
    driver: Driver, engine: AsyncEngine, keys: Collection[tuple[str, str]]
) -> int:
    """After an archive committed: release the first message of each (queue, key), if
    it waits."""
    by_queue: dict[str, list[str]] = {}
    for queue, key in keys:
        by_queue.setdefault(queue, []).append(key)
    m = driver.tables.message
    released = 0
    async with driver.own_transaction(engine) as conn:
        for queue, names in by_queue.items():
            for start in range(0, len(names), IDS_PER_STATEMENT):
                firsts = await driver.first_of_keys(
                    conn, queue, names[start : start + IDS_PER_STATEMENT]
                )
                released += await _release(conn, m, firsts)
    return released


async def sweep(driver: Driver, engine: AsyncEngine, queue: str, after: str) -> tuple[int, str]:
    """Release the first message of the next KEYS_PER_SWEEP keys of `queue` (in key
    order, after `after`) where it waits. Returns how many were released and where the
    next sweep starts ("" once the last key was reached)."""
    k = keyed_messages(driver.tables)
    async with driver.own_transaction(engine) as conn:
        heads = (
            await conn.execute(
                sa.select(k.keys.c.ordering_key, sa.func.min(k.keys.c.id))
                .select_from(k.source)
                .where(k.keys.c.queue == queue, k.keys.c.ordering_key > after)
                .group_by(k.keys.c.ordering_key)
                .order_by(k.keys.c.ordering_key)
                .limit(KEYS_PER_SWEEP)
            )
        ).all()
        released = await _release(conn, driver.tables.message, [first for _, first in heads])
    return released, heads[-1][0] if len(heads) == KEYS_PER_SWEEP else ""


async def _release(conn: AsyncConnection, m: sa.Table, ids: list[int]) -> int:
    if not ids:
        return 0
    result = await conn.execute(
        sa.update(m)
        .where(m.c.id.in_(ids), m.c.state == MessageState.WAITING)
        .values(state=MessageState.PENDING)
    )
    return result.rowcount or 0
