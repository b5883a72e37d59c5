"""One message in detail, a queue's live messages page by page, and purging a queue's
waiting messages."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware, utc_now
from faststream_sqla.drivers import Driver
from faststream_sqla.drivers._claim import ready_predicate, state_literal
from faststream_sqla.drivers.base import reading
from faststream_sqla.drivers.claimed_rows import load_headers
from faststream_sqla.drivers.ranges import purge_ranges
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.schema import MessageState, QueueTables

from .models import LiveMessage, MessageDetails, MessagePage, Progress
from .queues import start_progress

#: the states purge removes: waiting for a handler, never in flight
#: rows per purge transaction
PURGE_BATCH = 1000


async def find_message(
    driver: Driver, engine: AsyncEngine, message_id: int
) -> MessageDetails | None:
    """The message `message_id`, live or archived (live first: a message is archived
    and deleted in one transaction, so it is in one table or the other)."""
    m, a = driver.tables.message, driver.tables.archive
    async with reading(engine) as conn:
        row = (await conn.execute(sa.select(m).where(m.c.id == message_id))).mappings().first()
        archived = row is None
        if archived:
            row = (await conn.execute(sa.select(a).where(a.c.id == message_id))).mappings().first()
    if row is None:
        return None
    state = row["state"]
    return MessageDetails(
        id=row["id"],
        queue=row["queue"],
        state=state.value if isinstance(state, MessageState) else str(state),
        archived=archived,
        headers=load_headers(row["headers"]),
        payload=bytes(row["payload"]),
        correlation_id=row["correlation_id"],
        priority=row["priority"],
        ordering_key=row["ordering_key"],
        channel=row["channel"],
        idempotency_key=row["idempotency_key"],
        attempts_count=row["attempts_count"],
        deliveries_count=row["deliveries_count"],
        created_at=to_aware(row["created_at"]),
        first_attempt_at=to_aware(row["first_attempt_at"]),
        last_attempt_at=to_aware(row["last_attempt_at"]),
        expires_at=to_aware(row["expires_at"]),
        last_error=row["last_error"],
        next_attempt_at=None if archived else to_aware(row["next_attempt_at"]),
        acquired_at=None if archived else to_aware(row["acquired_at"]),
        archived_at=to_aware(row["archived_at"]) if archived else None,
        redriven_from=row["redriven_from"],
        redriven_to=row["redriven_to"] if archived else None,
    )


#: the states `message_page` lists, as `queues` counts them
MESSAGE_LIST_STATES = ("ready", "scheduled", "retrying", "processing", "waiting")


def _state_filters(m: sa.Table) -> dict[str, sa.ColumnElement[bool]]:
    """Each listed state as a predicate on the stored state and due time."""
    pending, retryable = (state_literal(s) for s in (MessageState.PENDING, MessageState.RETRYABLE))
    due = m.c.next_attempt_at <= utc_now()
    return {
        "ready": sa.and_(ready_predicate(m), due),
        "scheduled": sa.and_(m.c.state == pending, sa.not_(due)),
        "retrying": sa.and_(m.c.state == retryable, sa.not_(due)),
        "processing": m.c.state == state_literal(MessageState.PROCESSING),
        "waiting": m.c.state == state_literal(MessageState.WAITING),
    }


def checked_states(states: Sequence[str] | None) -> list[str]:
    """The states asked for (all by default); InvalidOptionError naming an unknown one."""
    if states is None:
        return list(MESSAGE_LIST_STATES)
    unknown = [s for s in states if s not in MESSAGE_LIST_STATES]
    if unknown or not states:
        msg = (
            f"cannot list state {shown(unknown[0] if unknown else '')}: choose from "
            f"{', '.join(MESSAGE_LIST_STATES)}"
        )
        raise InvalidOptionError(msg)
    return list(dict.fromkeys(states))


def message_cursor(after: str | None) -> int | None:
    """A page token (the last id of the previous page) as an id."""
    if after is None:
        return None
    if after.isascii() and after.isdigit() and len(after) < 20:
        return int(after)
    msg = f"not a page token: {shown(after)} (pass the next_page of the previous page)"
    raise InvalidOptionError(msg)


async def message_page(
    conn: AsyncConnection,
    tables: QueueTables,
    queue: str,
    states: Sequence[str],
    *,
    limit: int,
    after: str | None,
) -> MessagePage:
    """`queue`'s live messages in `states`, oldest id first, `limit` a page: keyset
    paging on the id, so a page costs the same however deep it is."""
    m = tables.message
    filters = _state_filters(m)
    last_id = message_cursor(after)
    # the state's name computed in the same statement, so a row is labelled as selected
    label = sa.case(*((filters[name], sa.literal(name)) for name in states), else_=None)
    query = (
        sa.select(
            m.c.id,
            m.c.queue,
            label.label("listed_state"),
            m.c.priority,
            m.c.channel,
            m.c.ordering_key,
            m.c.correlation_id,
            m.c.attempts_count,
            m.c.deliveries_count,
            m.c.created_at,
            m.c.next_attempt_at,
            m.c.last_error,
        )
        .where(m.c.queue == queue, sa.or_(*(filters[name] for name in states)))
        .order_by(m.c.id)
        .limit(limit + 1)
    )
    if last_id is not None:
        query = query.where(m.c.id > last_id)
    found = list(await conn.execute(query))
    items = [
        LiveMessage(
            id=row.id,
            queue=row.queue,
            state=row.listed_state,
            priority=row.priority,
            channel=row.channel,
            ordering_key=row.ordering_key,
            correlation_id=row.correlation_id,
            attempts_count=row.attempts_count,
            deliveries_count=row.deliveries_count,
            created_at=to_aware(row.created_at),
            next_attempt_at=to_aware(row.next_attempt_at),
            last_error=row.last_error,
        )
        for row in found[:limit]
    ]
    more = len(found) > limit
    return MessagePage(items, str(items[-1].id) if more else None)


async def purge_queue(
    driver: Driver, engine: AsyncEngine, queue: str, progress: Progress | None = None
) -> int:
    """Delete the queue's waiting messages in batches, each its own transaction; rows a
    claim has locked are skipped, and messages in flight are never touched. Returns how
    many went."""
    m = driver.tables.message
    ranges = purge_ranges(driver.tables.message)
    total = await start_progress(
        engine, m, [(m.c.queue == queue, *where) for where in ranges], progress
    )
    deleted = 0
    for where in ranges:
        while True:
            async with driver.own_transaction(engine) as conn:
                ids = list(
                    (
                        await conn.execute(
                            sa.select(m.c.id)
                            .where(m.c.queue == queue, *where)
                            .limit(PURGE_BATCH)
                            .with_for_update(skip_locked=True)
                        )
                    ).scalars()
                )
                if not ids:
                    break
                # locked by us: no claim can take them before the delete
                for table in driver.tables.live:  # the key rows first (MySQL)
                    result = await conn.execute(table.delete().where(table.c.id.in_(ids)))
                deleted += result.rowcount or 0
            if progress is not None:
                progress(deleted, total)
    return deleted
