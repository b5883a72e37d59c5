"""Dead letters (FAILED and EXPIRED archive rows): pages, a summary per queue, and
moving archived messages back to their queue (redrive, replay) with an audit trail.
The statements are in `drivers.dead_letter_reads` and `drivers.archive_moves`; here
are the checks, the batches and their retries, and the public models."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware, to_naive_utc
from faststream_sqla.drivers import Driver
from faststream_sqla.drivers.archive_moves import (
    ArchiveRange,
    MovedMeanwhile,
    MoveIds,
    MoveOldest,
    count_archived,
    count_archived_up_to,
    look_up_ids,
    move_back,
)
from faststream_sqla.drivers.base import reading, with_retries
from faststream_sqla.drivers.dead_letter_reads import (
    DeadLetterFiguresQuery,
    DeadLetterPageQuery,
    DeadLetterRow,
    dead_letter_figures,
    newest_dead_letters,
)
from faststream_sqla.durations import whole_number
from faststream_sqla.exceptions import (
    InvalidOptionError,
    MessageStateConflictError,
    UnknownMessageError,
    shown,
)
from faststream_sqla.schema import MessageState, QueueTables

from .models import (
    Count,
    DeadLetter,
    DeadLetterPage,
    DeadLetterSummary,
    ErrorCount,
    MoveResult,
    Progress,
)
from .queues import start_progress

#: dead letters a summary reads for its most common errors, newest first
SAMPLE_SIZE = 1000
#: archive rows moved per transaction by a redrive or replay
MOVE_BATCH = 500


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


async def dead_letter_page(
    conn: AsyncConnection,
    tables: QueueTables,
    queues: Sequence[str],
    *,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    after: str | None,
    error: str | None = None,
) -> DeadLetterPage:
    """Newest first: one range per queue and dead state, merged; with `error`, only
    those whose last error starts with it (a page may then hold fewer than `limit`
    before the last: it reads a bounded window of each range)."""
    cursor = None if after is None else _parse_cursor(after)
    # one row more than the page: whether there is a next page
    query = DeadLetterPageQuery(tables, queues, since, until, cursor, limit + 1, error)
    read = await newest_dead_letters(conn, query)
    newest = [_dead_letter(row) for row in read.rows]
    page = newest[:limit]
    if len(newest) > limit:
        return DeadLetterPage(page, _cursor(page[-1]))
    if read.looked_to is None:
        return DeadLetterPage(page, None)
    at, message_id = read.looked_to
    return DeadLetterPage(page, f"{to_aware(at).isoformat()},{message_id}")


def _dead_letter(row: DeadLetterRow) -> DeadLetter:
    archived_at = to_aware(row.archived_at)
    assert archived_at is not None
    return DeadLetter(
        id=row.id,
        queue=row.queue,
        state=getattr(row.state, "value", str(row.state)),
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
    figures = await dead_letter_figures(
        conn, DeadLetterFiguresQuery(tables, queue, cap, SAMPLE_SIZE)
    )
    count = sum(f.count for f in figures)
    oldest: datetime | None = None
    newest: datetime | None = None
    for f in figures:
        if f.oldest is None or f.newest is None:
            continue
        first, last = to_aware(f.oldest), to_aware(f.newest)
        oldest = first if oldest is None or first < oldest else oldest
        newest = last if newest is None or last > newest else newest
    if oldest is None or newest is None:
        return None
    errors = [error for f in figures for error in f.recent_errors]
    sample = heapq.nlargest(SAMPLE_SIZE, errors, key=lambda e: e.archived_at)
    common = Counter(first_line(e.last_error) for e in sample).most_common(5)
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
    wanted = sorted(set(ids))
    async with reading(engine) as conn:
        found = await look_up_ids(conn, driver.tables, wanted)
    names = {s.value for s in allowed}
    for message_id in wanted:
        if message_id in found.queued:
            msg = f"message {message_id} is still queued, not archived: nothing was moved"
            raise MessageStateConflictError(msg)
        archived = found.archived.get(message_id)
        if archived is None:
            raise UnknownMessageError(f"no message {message_id} in the queue or the archive")
        state = getattr(archived.state, "value", archived.state)
        if state == MessageState.REDRIVEN.value:
            msg = (
                f"message {message_id} was already moved back as message "
                f"{archived.redriven_to}: nothing was moved"
            )
            raise MessageStateConflictError(msg)
        if state not in names:
            msg = (
                f"message {message_id} is {state}, not one of "
                f"{', '.join(sorted(names))}: nothing was moved"
            )
            raise MessageStateConflictError(msg)


async def _move_until_settled(
    driver: Driver, engine: AsyncEngine, batch: MoveIds | MoveOldest
) -> dict[int, int]:
    """One batch in a transaction of its own, read again for as long as another mover
    takes some of its rows first (each time it does, fewer rows are left to read)."""

    async def once() -> dict[int, int]:
        async with driver.own_transaction(engine) as conn:
            return await move_back(driver, conn, batch)

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
    await check_ids(driver, engine, ids, allowed)
    wanted = sorted(set(ids))
    moved: dict[int, int] = {}
    for start in range(0, len(wanted), batch_size):
        chunk = tuple(wanted[start : start + batch_size])
        moved |= await _move_until_settled(driver, engine, MoveIds(chunk, tuple(allowed)))
        if progress is not None:
            progress(len(moved), len(wanted))
    skipped = {i: "moved meanwhile by another redrive" for i in wanted if i not in moved}
    return MoveResult(moved, skipped)


def move_ranges_of(
    queues: Sequence[str],
    states: Collection[MessageState],
    since: datetime | None,
    until: datetime | None,
    error: str | None,
) -> list[ArchiveRange]:
    return [ArchiveRange(q, state, since, until, error) for q in queues for state in states]


async def count_moves(
    conn: AsyncConnection, tables: QueueTables, ranges: Sequence[ArchiveRange], cap: int
) -> Count:
    """How many rows a move of `ranges` would take, counted up to `cap`."""
    found = await count_archived_up_to(conn, tables, ranges, cap)
    return Count(found, exact=found < cap)


async def move_ranges(
    driver: Driver,
    engine: AsyncEngine,
    queues: Sequence[str],
    states: Collection[MessageState],
    since: datetime | None,
    until: datetime | None,
    progress: Progress | None,
    batch_size: int = MOVE_BATCH,
    error: str | None = None,
) -> MoveResult:
    """Move every archive row of `queues` in `states` (and the time range, and whose
    error starts with `error`), oldest first, a batch per transaction; rows another
    mover holds are left to it."""
    ranges = move_ranges_of(queues, states, since, until, error)
    total = await start_progress(
        engine, lambda conn: count_archived(conn, driver.tables, ranges), progress
    )
    moved: dict[int, int] = {}
    for archive_range in ranges:
        while True:
            batch = await _move_until_settled(driver, engine, MoveOldest(archive_range, batch_size))
            if not batch:
                break
            moved |= batch
            if progress is not None:
                progress(len(moved), total)
    return MoveResult(moved)
