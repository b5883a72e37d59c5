"""One message in detail, a queue's live messages page by page, and purging a queue's
waiting messages. The statements are in `drivers.message_reads` and `drivers.purge`;
here are the checks of what the caller asked for and the public models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware
from faststream_sqla.drivers import Driver, message_reads
from faststream_sqla.drivers.claimed_rows import load_headers
from faststream_sqla.drivers.purge import Purge, count_waiting, purge_waiting
from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.message import decode_saved_state
from faststream_sqla.schema import DELIVERY_QUEUE, MessageState, QueueTables

from .endpoints import attempts as webhook_attempts
from .models import LiveMessage, MessageDetails, MessagePage, Progress
from .queues import start_progress
from .workers import holders

#: rows per purge transaction
PURGE_BATCH = 1000


async def find_message(
    conn: AsyncConnection, tables: QueueTables, message_id: int
) -> MessageDetails | None:
    """The message `message_id`, live or archived."""
    row = await message_reads.find_message(conn, tables, message_id)
    if row is None:
        return None
    state = row.state
    held_by = None
    if not row.archived and state == MessageState.PROCESSING:
        held_by = (await holders(conn, tables, [row.id])).get(row.id)
    tried = []
    if row.queue == DELIVERY_QUEUE:
        tried = await webhook_attempts(conn, tables, row.id)
    return MessageDetails(
        id=row.id,
        queue=row.queue,
        state=state.value if isinstance(state, MessageState) else str(state),
        archived=row.archived,
        headers=load_headers(row.headers),
        payload=row.payload,
        correlation_id=row.correlation_id,
        priority=row.priority,
        ordering_key=row.ordering_key,
        channel=row.channel,
        idempotency_key=row.idempotency_key,
        attempts_count=row.attempts_count,
        deliveries_count=row.deliveries_count,
        created_at=to_aware(row.created_at),
        first_attempt_at=to_aware(row.first_attempt_at),
        last_attempt_at=to_aware(row.last_attempt_at),
        expires_at=to_aware(row.expires_at),
        last_error=row.last_error,
        next_attempt_at=to_aware(row.next_attempt_at),
        acquired_at=to_aware(row.acquired_at),
        archived_at=to_aware(row.archived_at),
        redriven_from=row.redriven_from,
        redriven_to=row.redriven_to,
        held_by=held_by,
        topic=row.topic,
        saved_state=decode_saved_state(row.saved_state),
        webhook_attempts=tried,
    )


#: the states `message_page` lists, as `queues` counts them
MESSAGE_LIST_STATES = ("ready", "scheduled", "retrying", "processing", "waiting")


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


@dataclass(frozen=True)
class MessageFilter:
    """What a page of live messages keeps: `states` (as `checked_states` returns them)
    and, where given, one channel, ordering key or correlation id; `newest_first`
    turns the order round."""

    states: Sequence[str]
    channel: str | None = None
    ordering_key: str | None = None
    correlation_id: str | None = None
    newest_first: bool = False


async def message_page(
    conn: AsyncConnection,
    tables: QueueTables,
    queue: str,
    chosen: MessageFilter,
    *,
    limit: int,
    after: str | None,
) -> MessagePage:
    """`queue`'s live messages that `chosen` keeps, by id, `limit` a page: keyset
    paging on the id, so a page costs the same however deep it is. A page looks at
    `SCAN_WINDOW` of the queue's messages at most; when its filters keep few of them
    it holds fewer than `limit`, and `next_page` goes on from where it stopped."""
    # one row more than the page: whether there is a next page
    query = message_reads.MessagePageQuery(
        tables,
        queue,
        chosen.states,
        limit + 1,
        message_cursor(after),
        newest_first=chosen.newest_first,
        channel=chosen.channel,
        ordering_key=chosen.ordering_key,
        correlation_id=chosen.correlation_id,
    )
    found = await message_reads.message_page(conn, query)
    processing = [row.id for row in found.rows[:limit] if row.state == "processing"]
    held_by = await holders(conn, tables, processing)
    items = [
        LiveMessage(
            id=row.id,
            queue=row.queue,
            state=row.state,
            priority=row.priority,
            channel=row.channel,
            ordering_key=row.ordering_key,
            correlation_id=row.correlation_id,
            attempts_count=row.attempts_count,
            deliveries_count=row.deliveries_count,
            created_at=to_aware(row.created_at),
            next_attempt_at=to_aware(row.next_attempt_at),
            last_error=row.last_error,
            held_by=held_by.get(row.id),
        )
        for row in found.rows[:limit]
    ]
    if len(found.rows) > limit:
        return MessagePage(items, str(items[-1].id))
    return MessagePage(items, None if found.scanned_to is None else str(found.scanned_to))


async def purge_queue(
    driver: Driver, engine: AsyncEngine, queue: str, progress: Progress | None = None
) -> int:
    """Delete the queue's waiting messages in batches, each its own transaction; rows a
    claim has locked are skipped, and messages in flight are never touched. Returns how
    many went."""
    total = await start_progress(
        engine, lambda conn: count_waiting(conn, driver.tables, queue), progress
    )
    on_batch = None if progress is None else (lambda deleted: progress(deleted, total))
    return await purge_waiting(driver, engine, Purge(queue, PURGE_BATCH), on_batch)
