"""Dead letters (FAILED and EXPIRED archive rows): pages, a summary per queue, and
moving archived messages back to their queue (redrive, replay) with an audit trail."""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware, to_naive_utc
from faststream_sqla.drivers import Driver
from faststream_sqla.drivers._claim import state_literal as _literal
from faststream_sqla.drivers.base import NewMessage, reading, with_retries
from faststream_sqla.drivers.claimed_rows import load_headers
from faststream_sqla.durations import whole_number
from faststream_sqla.exceptions import InvalidOptionError, UnknownMessageError, shown
from faststream_sqla.schema import DEAD_STATES, MessageState, QueueTables

from .models import (
    Count,
    DeadLetter,
    DeadLetterPage,
    DeadLetterSummary,
    ErrorCount,
    MoveResult,
    Progress,
)
from .queues import capped_count, start_progress

#: dead letters a summary reads for its most common errors, newest first
SAMPLE_SIZE = 1000
#: archive rows moved per transaction by a redrive or replay
MOVE_BATCH = 500
#: archive rows one marking statement names (three bound values each)
MARK_ROWS = 500


def first_line(error: str | None) -> str:
    return (error or "").strip().splitlines()[0] if (error or "").strip() else "(no error)"


def _cursor(item: DeadLetter) -> str:
    return f"{item.archived_at.isoformat()},{item.id}"


def _parse_cursor(after: str) -> tuple[datetime, int]:
    at, _, message_id = after.rpartition(",")
    number = whole_number(message_id)
    try:
        if number is not None:
            return to_naive_utc(datetime.fromisoformat(at)), number
    except ValueError:
        pass
    msg = f"not a page token: {shown(after)} (pass the next_page of the previous page)"
    raise InvalidOptionError(msg)


def time_range(since: datetime | None, until: datetime | None) -> None:
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            msg = f"{name} must be an aware datetime (UTC or with an offset), got {value}"
            raise InvalidOptionError(msg)
    if since is not None and until is not None and since >= until:
        msg = f"the time range is the wrong way round: since {since} is not before until {until}"
        raise InvalidOptionError(msg)


def _in_range(a: sa.Table, since: datetime | None, until: datetime | None) -> list[Any]:
    where = []
    if since is not None:
        where.append(a.c.archived_at >= to_naive_utc(since))
    if until is not None:
        where.append(a.c.archived_at < to_naive_utc(until))
    return where


async def dead_letter_page(
    conn: AsyncConnection,
    tables: QueueTables,
    queues: Sequence[str],
    *,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: str | None,
) -> DeadLetterPage:
    """Newest first: one range per queue and dead state, merged."""
    a = tables.archive
    where = _in_range(a, since, until)
    if after is not None:
        at, last_id = _parse_cursor(after)
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
    found: list[DeadLetter] = []
    for queue in queues:
        for state in DEAD_STATES:
            rows = await conn.execute(
                sa.select(*columns)
                .where(a.c.queue == queue, a.c.state == _literal(state), *where)
                .order_by(a.c.archived_at.desc(), a.c.id.desc())
                .limit(limit + 1)
            )
            found += [_dead_letter(row) for row in rows]
    newest = heapq.nlargest(limit + 1, found, key=lambda d: (d.archived_at, d.id))
    page = newest[:limit]
    return DeadLetterPage(page, _cursor(page[-1]) if len(newest) > limit else None)


def _dead_letter(row: Any) -> DeadLetter:
    state = row.state
    archived_at = to_aware(row.archived_at)
    assert archived_at is not None
    return DeadLetter(
        id=row.id,
        queue=row.queue,
        state=getattr(state, "value", str(state)),
        attempts_count=row.attempts_count,
        archived_at=archived_at,
        last_error=row.last_error,
        correlation_id=row.correlation_id,
    )


async def dead_letter_summary(
    conn: AsyncConnection, tables: QueueTables, queue: str, cap: int
) -> DeadLetterSummary | None:
    """The queue's dead letters: how many (counted up to `cap`), the oldest and newest,
    and the most common errors among the newest SAMPLE_SIZE. None when it has none."""
    a = tables.archive
    one: sa.ColumnClause[Any] = sa.literal_column("1")
    count = 0
    oldest: datetime | None = None
    newest: datetime | None = None
    errors: list[tuple[datetime, str | None]] = []
    for state in DEAD_STATES:
        in_range = (a.c.queue == queue, a.c.state == _literal(state))
        capped = capped_count(sa.select(one).where(*in_range), cap)
        count += await conn.scalar(sa.select(capped)) or 0
        ends = (
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
        if ends[0] is None:
            continue
        first, last = to_aware(ends[0]), to_aware(ends[1])
        oldest = first if oldest is None or first < oldest else oldest
        newest = last if newest is None or last > newest else newest
        rows = await conn.execute(
            sa.select(a.c.archived_at, a.c.last_error)
            .where(*in_range)
            .order_by(a.c.archived_at.desc())
            .limit(SAMPLE_SIZE)
        )
        errors += [(archived_at, error) for archived_at, error in rows]
    if oldest is None or newest is None:
        return None
    sample = heapq.nlargest(SAMPLE_SIZE, errors, key=lambda e: e[0])
    common = Counter(first_line(error) for _, error in sample).most_common(5)
    return DeadLetterSummary(
        queue=queue,
        count=Count(min(count, cap), exact=count < cap),
        oldest=oldest,
        newest=newest,
        common_errors=[ErrorCount(error, n) for error, n in common],
    )


# -- moving archived messages back ----------------------------------------------------


async def check_ids(
    driver: Driver, engine: AsyncEngine, ids: Collection[int], allowed: Collection[MessageState]
) -> None:
    """Every id is an archived message in one of the `allowed` states, or nothing moves."""
    m, a = driver.tables.message, driver.tables.archive
    wanted = sorted(set(ids))
    async with reading(engine) as conn:
        states: dict[int, Any] = {}
        redriven: dict[int, int | None] = {}
        live: set[int] = set()
        for start in range(0, len(wanted), MOVE_BATCH):
            chunk = wanted[start : start + MOVE_BATCH]
            for message_id, state, to in await conn.execute(
                sa.select(a.c.id, a.c.state, a.c.redriven_to).where(a.c.id.in_(chunk))
            ):
                states[message_id] = getattr(state, "value", state)
                redriven[message_id] = to
            live |= set((await conn.execute(sa.select(m.c.id).where(m.c.id.in_(chunk)))).scalars())
    names = {s.value for s in allowed}
    for message_id in wanted:
        if message_id in live:
            msg = f"message {message_id} is still queued, not archived: nothing was moved"
            raise InvalidOptionError(msg)
        if message_id not in states:
            raise UnknownMessageError(f"no message {message_id} in the queue or the archive")
        if states[message_id] == MessageState.REDRIVEN.value:
            msg = (
                f"message {message_id} was already moved back as message "
                f"{redriven[message_id]}: nothing was moved"
            )
            raise InvalidOptionError(msg)
        if states[message_id] not in names:
            msg = (
                f"message {message_id} is {states[message_id]}, not one of "
                f"{', '.join(sorted(names))}: nothing was moved"
            )
            raise InvalidOptionError(msg)


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
    )


class MovedMeanwhile(Exception):
    """Another mover marked some of the rows this batch read: the batch is rolled back
    and read again. Only where reading did not lock the rows (SQLite, whose
    FOR UPDATE means nothing, and a user's engine whose reads run outside the
    transaction)."""


async def move_batch(
    driver: Driver,
    conn: AsyncConnection,
    selection: sa.Select,
    states: Collection[MessageState],
) -> dict[int, int]:
    """In the caller's transaction: copy the archive rows `selection` picks (in one of
    `states`) back to their queues and mark them REDRIVEN; {archived id: new id}.

    The mark only changes rows still in one of `states`, and counts them: if any row
    was marked by another mover since it was read, MovedMeanwhile leaves the
    transaction to roll back, copies included, so no message is moved twice."""
    a = driver.tables.archive
    rows = (await conn.execute(selection)).all()
    if not rows:
        return {}
    new_ids = await driver.insert_messages(conn, [_copy(row) for row in rows])
    moved = {row.id: new_id for row, new_id in zip(rows, new_ids, strict=True)}
    # One UPDATE per MARK_ROWS (CASE id WHEN old THEN new ...): a statement per row
    # would be a round trip each on drivers without pipelined executemany.
    pairs = list(moved.items())
    still = a.c.state.in_([_literal(s) for s in states])
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


def archive_columns(a: sa.Table) -> tuple[sa.Column, ...]:
    return (
        a.c.id,
        a.c.queue,
        a.c.headers,
        a.c.payload,
        a.c.correlation_id,
        a.c.priority,
        a.c.ordering_key,
        a.c.channel,
    )


async def _move_until_settled(
    driver: Driver,
    engine: AsyncEngine,
    selection: sa.Select,
    states: Collection[MessageState],
) -> dict[int, int]:
    """One batch in a transaction of its own, read again for as long as another mover
    takes some of its rows first (each time it does, fewer rows are left to read)."""

    async def once() -> dict[int, int]:
        async with driver.own_transaction(engine) as conn:
            return await move_batch(driver, conn, selection, states)

    while True:
        try:
            # a deadlock between two movers (MariaDB's gap locks) rolls back one batch
            return await with_retries(driver, once)
        except MovedMeanwhile:
            continue


async def move_ids(
    driver: Driver,
    engine: AsyncEngine,
    ids: Sequence[int],
    allowed: Collection[MessageState],
    progress: Progress | None,
    batch_size: int = MOVE_BATCH,
) -> MoveResult:
    a = driver.tables.archive
    await check_ids(driver, engine, ids, allowed)
    wanted = sorted(set(ids))
    moved: dict[int, int] = {}
    for start in range(0, len(wanted), batch_size):
        chunk = wanted[start : start + batch_size]
        selection = (
            sa.select(*archive_columns(a))
            .where(a.c.id.in_(chunk), a.c.state.in_([_literal(s) for s in allowed]))
            .order_by(a.c.id)
            .with_for_update()
        )
        moved |= await _move_until_settled(driver, engine, selection, allowed)
        if progress is not None:
            progress(len(moved), len(wanted))
    skipped = {i: "moved meanwhile by another redrive" for i in wanted if i not in moved}
    return MoveResult(moved, skipped)


async def move_ranges(
    driver: Driver,
    engine: AsyncEngine,
    queues: Sequence[str],
    states: Collection[MessageState],
    since: datetime | None,
    until: datetime | None,
    progress: Progress | None,
    batch_size: int = MOVE_BATCH,
) -> MoveResult:
    """Move every archive row of `queues` in `states` (and the time range), oldest
    first, a batch per transaction; rows another mover holds are left to it."""
    a = driver.tables.archive
    where = _in_range(a, since, until)
    ranges = [(queue, state) for queue in queues for state in states]
    total = await start_progress(
        engine,
        a,
        [(a.c.queue == queue, a.c.state == _literal(state), *where) for queue, state in ranges],
        progress,
    )
    moved: dict[int, int] = {}
    for queue, state in ranges:
        selection = (
            sa.select(*archive_columns(a))
            .where(a.c.queue == queue, a.c.state == _literal(state), *where)
            .order_by(a.c.archived_at, a.c.id)
            .limit(batch_size)
            .with_for_update(skip_locked=True)
        )
        while True:
            batch = await _move_until_settled(driver, engine, selection, [state])
            if not batch:
                break
            moved |= batch
            if progress is not None:
                progress(len(moved), total)
    return MoveResult(moved)
