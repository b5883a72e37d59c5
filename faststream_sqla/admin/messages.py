"""One message in detail, and purging a queue's waiting messages."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla.clock import to_aware
from faststream_sqla.dialects import Dialect
from faststream_sqla.dialects.base import reading
from faststream_sqla.dialects.ranges import purge_ranges
from faststream_sqla.parser import load_headers
from faststream_sqla.schema import MessageState

from .models import MessageDetails, Progress
from .queues import start_progress

#: the states purge removes: waiting for a handler, never in flight
#: rows per purge transaction
PURGE_BATCH = 1000


async def find_message(
    dialect: Dialect, engine: AsyncEngine, message_id: int
) -> MessageDetails | None:
    """The message `message_id`, live or archived (live first: a message is archived
    and deleted in one transaction, so it is in one table or the other)."""
    m, a = dialect.tables.message, dialect.tables.archive
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


async def purge_queue(
    dialect: Dialect, engine: AsyncEngine, queue: str, progress: Progress | None = None
) -> int:
    """Delete the queue's waiting messages in batches, each its own transaction; rows a
    claim has locked are skipped, and messages in flight are never touched. Returns how
    many went."""
    m = dialect.tables.message
    ranges = purge_ranges(dialect.tables.message)
    total = await start_progress(
        engine, m, [(m.c.queue == queue, *where) for where in ranges], progress
    )
    deleted = 0
    for where in ranges:
        while True:
            async with dialect.own_transaction(engine) as conn:
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
                for table in dialect.tables.live:  # the key rows first (MySQL)
                    result = await conn.execute(table.delete().where(table.c.id.in_(ids)))
                deleted += result.rowcount or 0
            if progress is not None:
                progress(deleted, total)
    return deleted
