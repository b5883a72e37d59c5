"""The reads `spark.publish_dataframe` makes to count each message once when Spark runs
a task again: which idempotency keys were archived since the call began, and which of
a batch's messages the call created. The same statements run on every database."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.schema import MessageState, QueueTables

from .base import TERMINAL

#: every state the archive holds: one range of the archive index each
_ARCHIVED = (*TERMINAL, MessageState.REDRIVEN)
#: read a batch's ids as one range while the range holds at most this many ids per
#: message of the batch (other tasks' inserts interleave)
DENSE_IDS = 4


@dataclass(frozen=True, slots=True)
class ArchivedKeysQuery:
    """Of `keys`, those archived in `queue` at or after `since` (naive UTC)."""

    tables: QueueTables
    queue: str
    since: datetime
    keys: Sequence[str]


async def archived_keys(conn: AsyncConnection, query: ArchivedKeysQuery) -> dict[str, str | None]:
    """The keys archived since, with the correlation ids of their messages."""
    if not query.keys:
        return {}
    archive = query.tables.archive
    result = await conn.execute(
        sa.select(archive.c.idempotency_key, archive.c.correlation_id).where(
            archive.c.queue == query.queue,
            archive.c.state.in_(list(_ARCHIVED)),
            archive.c.archived_at >= query.since,
            archive.c.idempotency_key.in_(list(query.keys)),
        )
    )
    return {key: correlation_id for key, correlation_id in result}


async def ids_correlated(
    conn: AsyncConnection, tables: QueueTables, ids: Collection[int], prefix: str
) -> set[int]:
    """Which of the messages `ids` have a correlation id starting with `prefix`. Read by
    primary key, in the queue and then the archive (consumers may have settled some
    already); a message moving in between is found in one or both, and counted once."""
    low, high = min(ids), max(ids)
    found: set[int] = set()
    for table in (tables.message, tables.archive):
        # A batch's new ids are dense: one range of the primary key, whose statement
        # is compiled once, instead of a list of a thousand ids each time
        dense = high - low < DENSE_IDS * len(ids)
        where = table.c.id.between(low, high) if dense else table.c.id.in_(sorted(ids))
        result = await conn.execute(
            sa.select(table.c.id).where(
                where, table.c.correlation_id.startswith(prefix, autoescape=True)
            )
        )
        found.update(result.scalars())
    return found & set(ids)
