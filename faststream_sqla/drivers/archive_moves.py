"""Moving archived messages back to their queues (redrive, replay): what the archive
holds under some ids, how many rows a move will walk, and one batch of the move
itself (copy as new PENDING messages, mark the archive rows REDRIVEN). The same
statements run on every database; the batches, retries and checks are the admin
API's."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.schema import MessageState, QueueTables

from ._claim import state_literal
from .base import NewMessage
from .claimed_rows import load_headers
from .dead_letter_reads import error_starts_with
from .queue_reads import capped_count, count_rows
from .ranges import archived_between

if TYPE_CHECKING:
    from .base import Driver

#: ids one look-up statement names
IDS_PER_LOOKUP = 500
#: archive rows one marking statement names (three bound values each)
MARK_ROWS = 500


class ArchivedId(NamedTuple):
    """What the archive holds under one id: its state, and the message a move copied
    it to (when it is REDRIVEN)."""

    state: MessageState | str
    redriven_to: int | None


@dataclass(frozen=True, slots=True)
class IdLookup:
    """Where some ids are: `archived` by id, and those still `queued` (live)."""

    archived: dict[int, ArchivedId]
    queued: frozenset[int]


async def look_up_ids(conn: AsyncConnection, tables: QueueTables, ids: Sequence[int]) -> IdLookup:
    """The archive rows and live messages of `ids`: primary-key reads, IDS_PER_LOOKUP
    ids per statement."""
    m, a = tables.message, tables.archive
    archived: dict[int, ArchivedId] = {}
    queued: set[int] = set()
    for start in range(0, len(ids), IDS_PER_LOOKUP):
        chunk = list(ids[start : start + IDS_PER_LOOKUP])
        for message_id, state, to in await conn.execute(
            sa.select(a.c.id, a.c.state, a.c.redriven_to).where(a.c.id.in_(chunk))
        ):
            archived[message_id] = ArchivedId(state, to)
        queued |= set((await conn.execute(sa.select(m.c.id).where(m.c.id.in_(chunk)))).scalars())
    return IdLookup(archived, frozenset(queued))


@dataclass(frozen=True, slots=True)
class ArchiveRange:
    """`queue`'s archive rows in `state`, archived in [since, until) (aware datetimes;
    None: no bound), and whose last_error starts with `error` (None: any): one range
    of the archive index, its rows filtered by their error."""

    queue: str
    state: MessageState
    since: datetime | None = None
    until: datetime | None = None
    error: str | None = None

    def terms(self, a: sa.Table) -> list[sa.ColumnElement[bool]]:
        terms = [
            a.c.queue == self.queue,
            a.c.state == state_literal(self.state),
            *archived_between(a, self.since, self.until),
        ]
        if self.error is not None:
            terms.append(error_starts_with(a, self.error))
        return terms


async def count_archived(
    conn: AsyncConnection, tables: QueueTables, ranges: Sequence[ArchiveRange]
) -> int:
    """The archive rows in `ranges` (a count reads every one of them)."""
    a = tables.archive
    return await count_rows(conn, a, [r.terms(a) for r in ranges])


async def count_archived_up_to(
    conn: AsyncConnection, tables: QueueTables, ranges: Sequence[ArchiveRange], cap: int
) -> int:
    """The archive rows in `ranges`, counted no further than `cap` (a preview of a move:
    its cost does not grow with the archive past the cap)."""
    a = tables.archive
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    total = 0
    for archive_range in ranges:
        if total >= cap:
            break
        query = sa.select(one).where(*archive_range.terms(a))
        total += await conn.scalar(sa.select(capped_count(query, cap - total))) or 0
    return total


@dataclass(frozen=True, slots=True)
class MoveIds:
    """A batch by id: the archive rows of `ids` still in one of `states`, locked."""

    ids: tuple[int, ...]
    states: tuple[MessageState, ...]


@dataclass(frozen=True, slots=True)
class MoveOldest:
    """A batch of a range: its `limit` oldest rows, passing over those another mover
    has locked."""

    range: ArchiveRange
    limit: int


class MovedMeanwhile(Exception):
    """Another mover marked some of the rows this batch read: the batch is rolled back
    and read again. Only where reading did not lock the rows (SQLite, whose
    FOR UPDATE means nothing, and a user's engine whose reads run outside the
    transaction)."""


def _archive_columns(a: sa.Table) -> tuple[sa.Column, ...]:
    """What a copy back to the queue keeps of an archive row."""
    return (
        a.c.id,
        a.c.queue,
        a.c.headers,
        a.c.payload,
        a.c.correlation_id,
        a.c.priority,
        a.c.ordering_key,
        a.c.channel,
        a.c.topic,
    )


def _selection(a: sa.Table, batch: MoveIds | MoveOldest) -> tuple[sa.Select, list[MessageState]]:
    """The statement that reads and locks `batch`'s rows, and the states a row must
    still be in to be marked."""
    if isinstance(batch, MoveIds):
        selection = (
            sa.select(*_archive_columns(a))
            .where(a.c.id.in_(batch.ids), a.c.state.in_([state_literal(s) for s in batch.states]))
            .order_by(a.c.id)
            .with_for_update()
        )
        return selection, list(batch.states)
    selection = (
        sa.select(*_archive_columns(a))
        .where(*batch.range.terms(a))
        .order_by(a.c.archived_at, a.c.id)
        .limit(batch.limit)
        .with_for_update(skip_locked=True)
    )
    return selection, [batch.range.state]


def _copy(row: Any) -> NewMessage:
    """A new PENDING message from an archive row: attempts and deliveries start again
    (the insert's defaults), idempotency key and expiry are cleared, the rest kept."""
    headers = load_headers(row.headers)
    return NewMessage(
        queue=row.queue,
        headers=headers,
        headers_json=json.dumps(headers),
        payload=bytes(row.payload),
        correlation_id=row.correlation_id,
        publish_at=None,
        priority=row.priority,
        ordering_key=row.ordering_key,
        # back to its channel's limits and turn, as it was published
        channel=row.channel,
        redriven_from=row.id,
        # the copy a topic publish made for this queue stays one
        topic=row.topic,
    )


async def move_back(
    driver: Driver, conn: AsyncConnection, batch: MoveIds | MoveOldest
) -> dict[int, int]:
    """In the caller's transaction: copy `batch`'s archive rows back to their queues and
    mark them REDRIVEN; {archived id: new id}.

    The mark only changes rows still in the batch's states, and counts them: if any row
    was marked by another mover since it was read, MovedMeanwhile leaves the
    transaction to roll back, copies included, so no message is moved twice."""
    a = driver.tables.archive
    selection, states = _selection(a, batch)
    rows = (await conn.execute(selection)).all()
    if not rows:
        return {}
    new_ids = await driver.insert_messages(conn, [_copy(row) for row in rows])
    moved = {row.id: new_id for row, new_id in zip(rows, new_ids, strict=True)}
    # One UPDATE per MARK_ROWS (CASE id WHEN old THEN new ...): a statement per row
    # would be a round trip each on drivers without pipelined executemany.
    pairs = list(moved.items())
    still = a.c.state.in_([state_literal(s) for s in states])
    marked = 0
    for start in range(0, len(pairs), MARK_ROWS):
        chunk = dict(pairs[start : start + MARK_ROWS])
        result = await conn.execute(
            sa.update(a)
            .where(a.c.id.in_(list(chunk)), still)
            .values(state=MessageState.REDRIVEN, redriven_to=sa.case(chunk, value=a.c.id))
        )
        marked += result.rowcount
    if marked != len(moved):
        raise MovedMeanwhile
    return moved
