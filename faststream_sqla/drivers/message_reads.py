"""The admin API's reads of single messages: one message by id (queued or archived),
and a queue's live messages a page at a time. The same statements run on every
database; the admin API turns the rows into its public models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import MessageState, QueueTables

from ._claim import ready_predicate, state_literal


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message as stored, in the message table or the archive (`archived`). The
    live table has no `archived_at` or `redriven_to`, the archive no `next_attempt_at`
    or `acquired_at`: those are None where the row has none. Times are as stored
    (naive UTC); headers as the driver returns them."""

    id: int
    queue: str
    state: MessageState | str
    archived: bool
    headers: Any
    payload: bytes
    correlation_id: str | None
    priority: int
    ordering_key: str | None
    channel: str | None
    idempotency_key: str | None
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    expires_at: datetime | None
    last_error: str | None
    next_attempt_at: datetime | None
    acquired_at: datetime | None
    archived_at: datetime | None
    redriven_from: int | None
    redriven_to: int | None
    topic: str | None
    #: what a handler saved when it deferred the message, as stored (live rows only)
    saved_state: bytes | None = None


async def find_message(
    conn: AsyncConnection, tables: QueueTables, message_id: int
) -> StoredMessage | None:
    """The message `message_id`, live or archived (live first: a message is archived
    and deleted in one transaction, so it is in one table or the other)."""
    m, a = tables.message, tables.archive
    row = (await conn.execute(sa.select(m).where(m.c.id == message_id))).mappings().first()
    archived = row is None
    if archived:
        row = (await conn.execute(sa.select(a).where(a.c.id == message_id))).mappings().first()
    if row is None:
        return None
    return StoredMessage(
        id=row["id"],
        queue=row["queue"],
        state=row["state"],
        archived=archived,
        headers=row["headers"],
        payload=bytes(row["payload"]),
        correlation_id=row["correlation_id"],
        priority=row["priority"],
        ordering_key=row["ordering_key"],
        channel=row["channel"],
        idempotency_key=row["idempotency_key"],
        attempts_count=row["attempts_count"],
        deliveries_count=row["deliveries_count"],
        created_at=row["created_at"],
        first_attempt_at=row["first_attempt_at"],
        last_attempt_at=row["last_attempt_at"],
        expires_at=row["expires_at"],
        last_error=row["last_error"],
        next_attempt_at=None if archived else row["next_attempt_at"],
        acquired_at=None if archived else row["acquired_at"],
        archived_at=row["archived_at"] if archived else None,
        redriven_from=row["redriven_from"],
        redriven_to=row["redriven_to"] if archived else None,
        topic=row["topic"],
        saved_state=None if archived or row["saved_state"] is None else bytes(row["saved_state"]),
    )


#: live rows of a queue one page looks at, at most, before its filters: a page whose
#: filters match few rows stops there and says where to go on (`ListedPage.scanned_to`)
SCAN_WINDOW = 10_000
#: the window a page first tries (message_page)
FIRST_WINDOW = 500


@dataclass(frozen=True, slots=True)
class MessagePageQuery:
    """Up to `limit` of `queue`'s live messages in `states` (ready, scheduled,
    retrying, processing, waiting: as the queue figures count them), oldest id first
    (newest first if `newest_first`), past the id `after_id` in that order (None: from
    the start), with the given `channel`, `ordering_key` and `correlation_id` (None:
    any). At most `window` of the queue's rows are looked at."""

    tables: QueueTables
    queue: str
    states: Sequence[str]
    limit: int
    after_id: int | None
    newest_first: bool = False
    channel: str | None = None
    ordering_key: str | None = None
    correlation_id: str | None = None
    window: int = SCAN_WINDOW


@dataclass(frozen=True, slots=True)
class ListedMessage:
    """One row of a page of live messages; `state` is the listed state it was
    selected as. Times as stored (naive UTC)."""

    id: int
    queue: str
    state: str
    priority: int
    channel: str | None
    ordering_key: str | None
    correlation_id: str | None
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_error: str | None


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


@dataclass(frozen=True, slots=True)
class ListedPage:
    """The rows a page found and, for a page its filters left short, the last id its
    window looked at when the window was full (None: the page is full, and the next
    starts past its last row, or the window reached the end of the queue)."""

    rows: list[ListedMessage]
    scanned_to: int | None


async def message_page(conn: AsyncConnection, query: MessagePageQuery) -> ListedPage:
    """Keyset paging on the id, so a page costs the same however deep it is: a window
    of at most `query.window` of the queue's rows past the cursor, then the filters on
    them, so that a filter few rows match cannot make a page read the whole queue.

    A first window of `FIRST_WINDOW` rows fills most pages (no filter, or a common
    one): the queue's rows sit among every other queue's in the primary key, which a
    window walks, so the full window is read only for a page the first left short."""
    first = min(query.window, max(FIRST_WINDOW, query.limit * 4))
    rows = await _filtered_rows(conn, query, first)
    if len(rows) >= query.limit:
        return ListedPage(rows, None)
    if first < query.window:
        rows = await _filtered_rows(conn, query, query.window)
    if len(rows) >= query.limit:
        return ListedPage(rows, None)
    looked = _window(query, query.window)
    seen, lowest, highest = (
        await conn.execute(
            sa.select(sa.func.count(), sa.func.min(looked.c.id), sa.func.max(looked.c.id))
        )
    ).one()
    scanned_to = None
    if seen >= query.window:
        scanned_to = lowest if query.newest_first else highest
    return ListedPage(rows, scanned_to)


def _window(query: MessagePageQuery, size: int) -> sa.Subquery:
    """The ids of the next `size` of the queue's rows past the cursor, in page order."""
    m = query.tables.message
    order = m.c.id.desc() if query.newest_first else m.c.id
    window = sa.select(m.c.id).where(m.c.queue == query.queue).order_by(order).limit(size)
    if query.after_id is not None:
        past = m.c.id < query.after_id if query.newest_first else m.c.id > query.after_id
        window = window.where(past)
    return window.subquery()


async def _filtered_rows(
    conn: AsyncConnection, query: MessagePageQuery, window: int
) -> list[ListedMessage]:
    """Up to `query.limit` rows of a window of `window` rows that pass the filters."""
    m = query.tables.message
    order = m.c.id.desc() if query.newest_first else m.c.id
    looked = _window(query, window)
    filters = _state_filters(m)
    # the state's name computed in the same statement, so a row is labelled as selected
    label = sa.case(*((filters[name], sa.literal(name)) for name in query.states), else_=None)
    wanted = [
        m.c.queue == query.queue,
        sa.or_(*(filters[name] for name in query.states)),
    ]
    for column, value in (
        (m.c.channel, query.channel),
        (m.c.ordering_key, query.ordering_key),
        (m.c.correlation_id, query.correlation_id),
    ):
        if value is not None:
            wanted.append(column == value)
    statement = (
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
        .select_from(m.join(looked, looked.c.id == m.c.id))
        .where(*wanted)
        .order_by(order)
        .limit(query.limit)
    )
    return [
        ListedMessage(
            id=row.id,
            queue=row.queue,
            state=row.listed_state,
            priority=row.priority,
            channel=row.channel,
            ordering_key=row.ordering_key,
            correlation_id=row.correlation_id,
            attempts_count=row.attempts_count,
            deliveries_count=row.deliveries_count,
            created_at=row.created_at,
            next_attempt_at=row.next_attempt_at,
            last_error=row.last_error,
        )
        for row in await conn.execute(statement)
    ]
