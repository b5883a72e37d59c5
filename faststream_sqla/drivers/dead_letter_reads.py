"""The admin API's reads of dead letters (FAILED and EXPIRED archive rows): a page,
newest first, and one queue's figures. Each reads one range of the archive index
(queue, state, archived_at) per queue and dead state; the same statements run on
every database."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.schema import DEAD_STATES, MessageState, QueueTables

from ._claim import state_literal
from .queue_reads import capped_count
from .ranges import archived_between


@dataclass(frozen=True, slots=True)
class DeadLetterPageQuery:
    """The newest `limit` dead letters of `queues` archived in [since, until) (aware
    datetimes), after `after`: the (archived_at as stored, id) of the previous page's
    last row, None for the first page."""

    tables: QueueTables
    queues: Sequence[str]
    since: datetime | None
    until: datetime | None
    after: tuple[datetime, int] | None
    limit: int
    #: only those whose last_error starts with this (None: all)
    error: str | None = None
    #: rows of each range an `error` filter looks at, at most
    window: int = 10_000


@dataclass(frozen=True, slots=True)
class DeadLetterRow:
    """One dead letter as a page lists it; `archived_at` as stored (naive UTC)."""

    id: int
    queue: str
    state: MessageState | str
    attempts_count: int
    archived_at: datetime
    last_error: str | None
    correlation_id: str | None


def error_starts_with(a: sa.Table, error: str) -> sa.ColumnElement[bool]:
    """The archive rows whose last_error starts with `error` (wildcards in it matched as
    themselves)."""
    return a.c.last_error.startswith(error, autoescape=True)


@dataclass(frozen=True, slots=True)
class DeadLetterRows:
    """A page's rows, newest first, and where its error filter stopped looking: the
    (archived_at, id) of the newest row past which some range was not read (None: every
    range was read to its end). Rows older than it are left for the next page."""

    rows: list[DeadLetterRow]
    looked_to: tuple[datetime, int] | None


async def newest_dead_letters(conn: AsyncConnection, query: DeadLetterPageQuery) -> DeadLetterRows:
    """Newest first: the first `limit` of each queue's and dead state's range, merged.
    With an error filter, each range's first `window` rows are read and filtered, so a
    rare error cannot make a page read the whole archive."""
    a = query.tables.archive
    where = archived_between(a, query.since, query.until)
    if query.after is not None:
        at, last_id = query.after
        where.append(sa.or_(a.c.archived_at < at, sa.and_(a.c.archived_at == at, a.c.id < last_id)))
    columns = (
        a.c.id,
        a.c.queue,
        a.c.state,
        a.c.attempts_count,
        a.c.archived_at,
        a.c.last_error,
        a.c.correlation_id,
    )
    newest = (a.c.archived_at.desc(), a.c.id.desc())
    found: list[DeadLetterRow] = []
    looked_to: tuple[datetime, int] | None = None
    for queue in query.queues:
        for state in DEAD_STATES:
            in_range = (a.c.queue == queue, a.c.state == state_literal(state), *where)
            if query.error is None:
                rows = await conn.execute(
                    sa.select(*columns).where(*in_range).order_by(*newest).limit(query.limit)
                )
                found += [DeadLetterRow(**row._mapping) for row in rows]
                continue
            window = (
                sa.select(a.c.id, a.c.archived_at)
                .where(*in_range)
                .order_by(*newest)
                .limit(query.window)
                .subquery()
            )
            seen, oldest_at = (
                await conn.execute(sa.select(sa.func.count(), sa.func.min(window.c.archived_at)))
            ).one()
            if seen >= query.window:
                oldest_id = await conn.scalar(
                    sa.select(sa.func.min(window.c.id)).where(window.c.archived_at == oldest_at)
                )
                end = (oldest_at, oldest_id)
                looked_to = end if looked_to is None else max(looked_to, end)
            rows = await conn.execute(
                sa.select(*columns)
                .select_from(a.join(window, window.c.id == a.c.id))
                .where(error_starts_with(a, query.error))
                .order_by(*newest)
                .limit(query.limit)
            )
            found += [DeadLetterRow(**row._mapping) for row in rows]
    if looked_to is not None:
        # past looked_to some range was not read: those rows wait for the next page
        found = [d for d in found if (d.archived_at, d.id) >= looked_to]
    return DeadLetterRows(
        heapq.nlargest(query.limit, found, key=lambda d: (d.archived_at, d.id)), looked_to
    )


class RecentError(NamedTuple):
    """A dead letter's error and when it was archived (as stored)."""

    archived_at: datetime
    last_error: str | None


@dataclass(frozen=True, slots=True)
class DeadStateFigures:
    """One queue's dead letters of one state: how many (up to the query's `cap`), the
    first and last archived_at (as stored; None when there are none), and the errors
    of the newest `sample_size`, newest first."""

    state: MessageState
    count: int
    oldest: datetime | None
    newest: datetime | None
    recent_errors: list[RecentError]


@dataclass(frozen=True, slots=True)
class DeadLetterFiguresQuery:
    tables: QueueTables
    queue: str
    cap: int
    sample_size: int


async def dead_letter_figures(
    conn: AsyncConnection, query: DeadLetterFiguresQuery
) -> list[DeadStateFigures]:
    """`query.queue`'s dead letters, per dead state: bounded reads of the ends of its
    range and of a sample of its newest rows."""
    a = query.tables.archive
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    figures = []
    for state in DEAD_STATES:
        in_range = (a.c.queue == query.queue, a.c.state == state_literal(state))
        capped = capped_count(sa.select(one).where(*in_range), query.cap)
        count = await conn.scalar(sa.select(capped)) or 0
        oldest, newest = (
            await conn.execute(
                sa.select(
                    sa.select(a.c.archived_at)
                    .where(*in_range)
                    .order_by(a.c.archived_at)
                    .limit(1)
                    .scalar_subquery(),
                    sa.select(a.c.archived_at)
                    .where(*in_range)
                    .order_by(a.c.archived_at.desc())
                    .limit(1)
                    .scalar_subquery(),
                )
            )
        ).one()
        errors: list[RecentError] = []
        if oldest is not None:
            rows = await conn.execute(
                sa.select(a.c.archived_at, a.c.last_error)
                .where(*in_range)
                .order_by(a.c.archived_at.desc())
                .limit(query.sample_size)
            )
            errors = [RecentError(archived_at, error) for archived_at, error in rows]
        figures.append(DeadStateFigures(state, count, oldest, newest, errors))
    return figures
