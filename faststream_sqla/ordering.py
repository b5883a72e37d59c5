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

The statements are in `drivers/ordering.py`; this module decides when they run.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from faststream_sqla.drivers.base import any_row_has
from faststream_sqla.drivers.ordering import (
    IDS_PER_STATEMENT,
    hold_waiting,
    key_heads,
    release_if_first,
    release_waiting,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from faststream_sqla.drivers import Driver
    from faststream_sqla.drivers.base import NewMessage

#: keys a sweep looks at per queue and pass
KEYS_PER_SWEEP = 500


def has_ordering_keys(rows: Sequence[NewMessage]) -> bool:
    return any_row_has(rows, "ordering_key")


async def hold_behind_keys(
    driver: Driver, conn: AsyncConnection, rows: Sequence[NewMessage], ids: Sequence[int]
) -> list[int]:
    """In the publishing transaction, after the insert: set WAITING the new keyed
    messages that have an earlier message of their key; returns their ids."""
    keyed = [i for row, i in zip(rows, ids, strict=True) if row.ordering_key is not None]
    return await hold_waiting(conn, driver.tables, keyed)


async def release_first(driver: Driver, engine: AsyncEngine, ids: Sequence[int]) -> int:
    """After the publish committed: release those of `ids` that are first of their key."""
    async with driver.own_transaction(engine) as conn:
        return await release_if_first(conn, driver.tables, ids)


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
                released += await release_waiting(conn, m, firsts)
    return released


async def sweep(driver: Driver, engine: AsyncEngine, queue: str, after: str) -> tuple[int, str]:
    """Release the first message of the next KEYS_PER_SWEEP keys of `queue` (in key
    order, after `after`) where it waits. Returns how many were released and where the
    next sweep starts ("" once the last key was reached)."""
    async with driver.own_transaction(engine) as conn:
        heads = await key_heads(conn, driver.tables, queue, after, KEYS_PER_SWEEP)
        released = await release_waiting(conn, driver.tables.message, [h.id for h in heads])
    return released, heads[-1].ordering_key if len(heads) == KEYS_PER_SWEEP else ""


__all__ = [
    "IDS_PER_STATEMENT",
    "KEYS_PER_SWEEP",
    "has_ordering_keys",
    "hold_behind_keys",
    "release_first",
    "release_next",
    "sweep",
]
