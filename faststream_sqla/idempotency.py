"""Publishing with idempotency keys: a queue holds one active message per key.

A unique index on (queue, idempotency_key) makes the database the judge, whatever the
number of publishers. A publish first reads the keys it carries: a key already held by
a message with the same payload gives that message's id and writes nothing, one held
with another payload raises `IdempotencyConflictError` before anything is written.
The remaining rows are then inserted. A publisher that loses a race to a concurrent
one (the unique index refuses its row) has its insert undone (a savepoint, or its own
transaction) and reads the keys again, now seeing the winner's row.

The ids come from those reads and from the insert, matched to the items by key, so
they never depend on the insert returning one id per item in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.drivers.base import any_row_has
from faststream_sqla.exceptions import IdempotencyConflictError, shown

if TYPE_CHECKING:
    from faststream_sqla.drivers import Driver
    from faststream_sqla.drivers.base import NewMessage

#: how often a publish reads the keys again after losing a race for one. Each retry
#: follows a commit of a row with one of its keys, so a few suffice unless that row is
#: settled and its key reused again and again between our read and our insert.
MAX_RACES = 10

#: run after the insert, in its transaction, with the rows inserted and their ids
AfterInsert = Callable[[AsyncConnection, "Sequence[NewMessage]", list[int]], Awaitable[None]]


def has_keys(rows: Sequence[NewMessage]) -> bool:
    return any_row_has(rows, "idempotency_key")


def is_key_taken(exc: BaseException) -> bool:
    """Whether `exc` is the idempotency index refusing a second row of a key (each
    database names the index or its columns in the message)."""
    orig = getattr(exc, "orig", None) or exc
    return "idempotency" in str(orig) and (
        isinstance(exc, sa.exc.IntegrityError) or "Integrity" in type(orig).__name__
    )


async def insert_in_own_transaction(
    driver: Driver,
    engine: AsyncEngine,
    rows: Sequence[NewMessage],
    *,
    relaxed: bool = False,
    after_insert: AfterInsert | None = None,
) -> list[int]:
    # Optimistic first: most keys are new, and then the plain insert (one round trip on
    # PostgreSQL) is all it takes. It is atomic, so a refusal leaves nothing behind; the
    # careful way (read the keys, insert the rest) follows.
    if after_insert is None:
        try:
            return await driver.insert_committed(engine, rows, relaxed=relaxed)
        except Exception as e:
            if not is_key_taken(e):
                raise

    async def attempt(latest: bool) -> list[int]:
        async with driver.own_transaction(engine) as conn:
            return await _insert_new_keys(
                driver, conn, rows, latest=latest, after_insert=after_insert
            )

    return await _until_won(attempt, rows)


async def insert_in_transaction(
    driver: Driver,
    conn: AsyncConnection,
    rows: Sequence[NewMessage],
    *,
    after_insert: AfterInsert | None = None,
) -> list[int]:
    """In the caller's transaction: each try is a savepoint, so a lost race undoes only
    this publish's rows and leaves the transaction usable."""

    async def attempt(latest: bool) -> list[int]:
        async with conn.begin_nested():
            return await _insert_new_keys(
                driver, conn, rows, latest=latest, after_insert=after_insert
            )

    return await _until_won(attempt, rows)


async def _until_won(
    attempt: Callable[[bool], Awaitable[list[int]]], rows: Sequence[NewMessage]
) -> list[int]:
    """Run `attempt` until no other publisher takes one of its keys in between; each
    try after a lost race reads the newest committed rows (`latest`)."""
    for race in range(MAX_RACES):
        try:
            return await attempt(race > 0)
        except Exception as e:
            if not is_key_taken(e):
                raise
    raise _lost_every_race(rows)


async def _insert_new_keys(
    driver: Driver,
    conn: AsyncConnection,
    rows: Sequence[NewMessage],
    *,
    latest: bool,
    after_insert: AfterInsert | None = None,
) -> list[int]:
    # Keys are per queue: a publish to a topic writes a copy into each bound queue,
    # and each queue holds (or not) its own message of the key.
    first_of_key: dict[tuple[str, str], NewMessage] = {}
    for row in rows:
        key = row.idempotency_key
        if key is None:
            continue
        earlier = first_of_key.setdefault((row.queue, key), row)
        if earlier.payload != row.payload:
            msg = (
                f"idempotency key {shown(key)} is given twice in this batch, with different "
                "payloads"
            )
            raise IdempotencyConflictError(msg, key=key)
    keys_of_queue: dict[str, list[str]] = {}
    for queue, key in first_of_key:
        keys_of_queue.setdefault(queue, []).append(key)
    held: dict[tuple[str, str], tuple[int, bytes]] = {}
    for queue, keys in keys_of_queue.items():
        found = await driver.find_idempotency_keys(conn, queue, keys, latest=latest)
        held.update(((queue, key), value) for key, value in found.items())
    for (queue, key), (message_id, payload) in held.items():
        if payload != first_of_key[queue, key].payload:
            msg = (
                f"queue {shown(queue)} already holds message {message_id} with idempotency key "
                f"{shown(key)} and a different payload; nothing was written"
            )
            raise IdempotencyConflictError(msg, key=key, message_id=message_id)
    fresh = [
        row
        for row in rows
        if row.idempotency_key is None
        or (
            (row.queue, row.idempotency_key) not in held
            and first_of_key[row.queue, row.idempotency_key] is row
        )
    ]
    new_ids = await driver.insert_messages(conn, fresh) if fresh else []
    if after_insert is not None and fresh:
        await after_insert(conn, fresh, new_ids)
    id_of_key = {key: message_id for key, (message_id, _) in held.items()}
    id_of_row = {}
    for row, message_id in zip(fresh, new_ids, strict=True):
        id_of_row[id(row)] = message_id
        if row.idempotency_key is not None:
            id_of_key[row.queue, row.idempotency_key] = message_id
    return [
        id_of_row[id(row)]
        if row.idempotency_key is None
        else id_of_key[row.queue, row.idempotency_key]
        for row in rows
    ]


def _lost_every_race(rows: Sequence[NewMessage]) -> IdempotencyConflictError:
    keys = sorted({r.idempotency_key for r in rows if r.idempotency_key is not None})
    queues = sorted({r.queue for r in rows})
    where = f"queue {shown(queues[0])}" if len(queues) == 1 else f"queues {shown(queues)}"
    msg = (
        f"idempotency keys {shown(keys)} of {where} were taken by other "
        f"publishers {MAX_RACES} times in a row; nothing was written"
    )
    return IdempotencyConflictError(msg, key=keys[0])
