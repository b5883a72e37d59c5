"""`QueueAdmin`: every operation on a running queue, for the command line, the
dashboard and the metrics collector. It returns dataclasses and raises typed errors;
it never prints or exits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from typing_extensions import Self

from faststream_sqla.channels.limits import Rate
from faststream_sqla.channels.store import UNSET, _Unset
from faststream_sqla.connecting import create_engine
from faststream_sqla.drivers import Driver, check_replica_kind, driver_for, queue_reads
from faststream_sqla.drivers.base import READ_TIMEOUT_RANGE, TERMINAL, reading
from faststream_sqla.drivers.postgresql import partitions
from faststream_sqla.exceptions import (
    InvalidEndpointError,
    InvalidOptionError,
    ReadTimeoutError,
    UnknownEndpointError,
    UnknownMessageError,
    UnknownQueueError,
    require_seconds,
    require_whole,
    shown,
)
from faststream_sqla.migrations import check_schema
from faststream_sqla.schema import (
    DEAD_STATES,
    DEFAULT_ARCHIVE_TABLE,
    DEFAULT_MESSAGE_TABLE,
    WHOLE_QUEUE,
    MessageState,
    QueueTables,
    TableNames,
    validate_queue_name,
)

from . import archive, controls, dead_letters, messages, queues, schedules, topics, workers
from . import channels as limits
from . import endpoints as webhook_endpoints
from .archive import PRUNE_BATCH
from .dead_letters import MOVE_BATCH
from .models import (
    Attempt,
    Binding,
    BreakerStatus,
    BreakerTransition,
    ChannelStatus,
    Count,
    DeadLetterPage,
    DeadLetterSummary,
    Endpoint,
    MessageDetails,
    MessagePage,
    MoveResult,
    NewSecret,
    Progress,
    QueueLimits,
    QueueStats,
    ReplicaLag,
    ScheduleInfo,
    Throughput,
    TopicRoute,
    WorkerInfo,
)

#: a rate as `set_channel_limits` and `set_queue_limits` take it: "5/s", "100/min",
#: "10/30s", a `Rate`, or a (count, period) pair with the period in seconds or a timedelta
RateLike = Rate | str | tuple[int, float | timedelta]

#: counts stop here by default (models.Count): enough to tell a backlog, and a cost that
#: does not grow with it
DEFAULT_EXACT_UP_TO = 5_000
MAX_PAGE = 1000
#: the most spans `throughput()` counts: each is one bounded count
MAX_THROUGHPUT_SPANS = 120
#: changes of state `breakers()` reports with each breaker
RECENT_TRANSITIONS = 5
#: the bound the dashboard puts on each read by default, in seconds: a page waits no
#: longer than a person would before reloading
DEFAULT_READ_TIMEOUT = 5.0
#: states a replay takes by default: every final outcome
REPLAYABLE = TERMINAL


class QueueAdmin:
    """Operations on the queues of one database.

    Every call checks the schema first, once.

    Args:
        engine: an `AsyncEngine` (kept open) or a URL (an engine of our own, closed by
            `close()` or on leaving `async with`).
        message_table: the broker's `message_table` (default `"message"`).
        archive_table: the broker's `archive_table` (default `"message_archive"`).
        exact_up_to: counts stop at this many (default 5,000, at most 10,000,000) and
            are then reported as "at least" (`Count.exact` is False), so their cost
            does not grow with the tables.
        read_url: a replica of the same database (a URL, or an `AsyncEngine` kept
            open) for every call that only reads; `replica_lag()` says how far behind
            it is. Every change still goes to `engine`, the primary, and so do the
            reads a change makes. A replica of another kind of database is a
            ReplicaMismatchError.
        read_timeout: a bound in seconds (0.1 to 300) on each statement of every call
            that only reads: past it the database gives up on the statement and the
            call raises ReadTimeoutError. None (the default) waits as long as it takes.
            The changes, and the reads a change makes, are never bound.
    """

    def __init__(
        self,
        engine: AsyncEngine | str | sa.URL,
        *,
        message_table: str = DEFAULT_MESSAGE_TABLE,
        archive_table: str = DEFAULT_ARCHIVE_TABLE,
        exact_up_to: int = DEFAULT_EXACT_UP_TO,
        read_url: AsyncEngine | str | sa.URL | None = None,
        read_timeout: float | None = None,
    ) -> None:
        require_whole("exact_up_to", exact_up_to, 10_000_000)
        #: the bound on each statement of a call that only reads, or None
        self.read_timeout = read_timeout
        if read_timeout is not None:
            self.read_timeout = require_seconds("read_timeout", read_timeout, *READ_TIMEOUT_RANGE)
        self._owned = not isinstance(engine, AsyncEngine)
        self.engine = engine if isinstance(engine, AsyncEngine) else create_engine(engine)
        #: where the calls that only read go: the replica, else the primary
        self.read_engine = self.engine
        self._owns_reads = False
        if read_url is not None:
            self._owns_reads = not isinstance(read_url, AsyncEngine)
            self.read_engine = (
                read_url if isinstance(read_url, AsyncEngine) else create_engine(read_url)
            )
            check_replica_kind(self.engine, self.read_engine)
        self.exact_up_to = exact_up_to
        names = TableNames(message_table, archive_table)
        self.driver: Driver = driver_for(self.engine, QueueTables(names))
        self.driver.configure_engine(self.engine, owned=self._owned)
        if self.read_engine is not self.engine:
            self.driver.configure_engine(self.read_engine, owned=self._owns_reads)
        #: the engines whose schema was checked
        self._checked: set[AsyncEngine] = set()
        self._prepared = False
        self._first_call = asyncio.Lock()  # concurrent first calls check the schema once

    @property
    def tables(self) -> QueueTables:
        return self.driver.tables

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owned:
            await self.engine.dispose()
        if self._owns_reads:
            await self.read_engine.dispose()

    @asynccontextmanager
    async def _reads(self) -> AsyncIterator[AsyncConnection]:
        """A connection to `read_engine` for a call that only reads, bound by
        `read_timeout`; the bound passing is ReadTimeoutError."""
        try:
            async with self.driver.bounded_reading(self.read_engine, self.read_timeout) as conn:
                yield conn
        except sa.exc.DBAPIError as exc:
            if self.read_timeout is not None and self.driver.is_read_timeout(exc):
                raise ReadTimeoutError(self.read_timeout) from exc
            raise

    @property
    def reads_from_replica(self) -> bool:
        """Whether the calls that only read go to a replica (`read_url`)."""
        return self.read_engine is not self.engine

    async def replica_lag(self) -> ReplicaLag | None:
        """How far the replica the reads go to is behind its primary; None when they
        go to the primary (no `read_url`)."""
        if not self.reads_from_replica:
            return None
        async with self._reads() as conn:
            return ReplicaLag(await self.driver.replica_lag(conn))

    async def _prepare(self, *, writes: bool = False) -> None:
        """The schema checked, once per engine: the replica's before its first read,
        the primary's before the first change; before the first change, the driver's
        own start-up reads too (MySQL's insert settings), which reads do not need."""
        engine = self.engine if writes else self.read_engine
        if engine in self._checked and (self._prepared or not writes):
            return
        async with self._first_call:
            if engine not in self._checked:
                await check_schema(engine, self.tables)
                self._checked.add(engine)
            if writes and not self._prepared:
                await self.driver.prepare(self.engine)
                self._prepared = True

    # -- looking ---------------------------------------------------------------------

    async def queue_names(self) -> list[str]:
        """Every queue with a queued or archived message."""
        await self._prepare()
        async with self._reads() as conn:
            return await queue_reads.queue_names(conn, self.tables)

    async def queues(
        self, names: Sequence[str] | None = None, *, unknown_as_empty: bool = False
    ) -> list[QueueStats]:
        """Figures per queue (all queues, or `names`). A name no message ever had is an
        UnknownQueueError, or zeros with `unknown_as_empty` (a monitor's fixed list)."""
        await self._prepare()
        async with self._reads() as conn:
            if names is None:
                names = await queue_reads.queue_names(conn, self.tables)
            else:
                for name in names:
                    if unknown_as_empty:
                        validate_queue_name(name)
                    else:
                        await self._known_queue(conn, name)
            return [
                await queues.queue_stats(conn, self.tables, name, self.exact_up_to)
                for name in names
            ]

    async def throughput(
        self, queue: str, *, spans: int = 12, span_seconds: int = 300
    ) -> Throughput:
        """How many of `queue`'s messages were archived in each of `spans` spans of
        `span_seconds` (default: the last hour in five-minute spans), oldest first;
        bounded counts over the archive's time index, as `queues()`'s figures."""
        (found,) = await self.throughputs([queue], spans=spans, span_seconds=span_seconds)
        return found

    async def throughputs(
        self, names: Sequence[str], *, spans: int = 12, span_seconds: int = 300
    ) -> list[Throughput]:
        """`throughput()` of each of `names`, in one read: an overview's sparklines."""
        require_whole("spans", spans, MAX_THROUGHPUT_SPANS)
        require_whole("span_seconds", span_seconds, 86_400)
        for queue in names:
            validate_queue_name(queue)
        await self._prepare()
        async with self._reads() as conn:
            return await queues.queue_throughputs(
                conn, self.tables, names, spans, span_seconds, self.exact_up_to
            )

    async def inspect(self, message_id: int) -> MessageDetails:
        """One message, queued or archived."""
        await self._prepare()
        async with self._reads() as conn:
            found = await messages.find_message(conn, self.tables, _id(message_id))
        if found is None:
            raise UnknownMessageError(f"no message {message_id} in the queue or the archive")
        return found

    async def messages(
        self,
        queue: str,
        *,
        states: Sequence[str] | None = None,
        limit: int = 50,
        after: str | None = None,
        channel: str | None = None,
        ordering_key: str | None = None,
        correlation_id: str | None = None,
        newest_first: bool = False,
    ) -> MessagePage:
        """`queue`'s live messages, oldest first (newest first with `newest_first`), in
        `states` (ready, scheduled, retrying, processing, waiting; default all) and of
        the `channel`, `ordering_key` and `correlation_id` given, `limit` a page; pass a
        page's `next_page` as `after` for the next. A page looks at 10,000 of the
        queue's messages at most, so a rare filter may give short pages before the
        last. UnknownQueueError for a queue no message ever had."""
        validate_queue_name(queue)
        chosen = messages.MessageFilter(
            messages.checked_states(states),
            channel=_optional_text("channel", channel),
            ordering_key=_optional_text("ordering_key", ordering_key),
            correlation_id=_optional_text("correlation_id", correlation_id),
            newest_first=newest_first,
        )
        require_whole("limit", limit, MAX_PAGE)
        messages.message_cursor(after)  # a bad token fails before the database is asked
        await self._prepare()
        async with self._reads() as conn:
            await self._known_queue(conn, queue)
            return await messages.message_page(
                conn, self.tables, queue, chosen, limit=limit, after=after
            )

    async def dead_letters(
        self,
        *,
        queue: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        after: str | None = None,
        error: str | None = None,
    ) -> DeadLetterPage:
        """Archived FAILED and EXPIRED messages, newest first, `limit` a page; pass a
        page's `next_page` as `after` for the next. With `error`, only those whose last
        error starts with it (a summary's common error, say); a page then reads 10,000
        dead letters of each queue at most, so it may hold fewer than `limit` before
        the last."""
        require_whole("limit", limit, MAX_PAGE)
        dead_letters.time_range(since, until)
        error = _optional_text("error", error)
        await self._prepare()
        async with self._reads() as conn:
            names = await self._queues_or_one(conn, queue)
            return await dead_letters.dead_letter_page(
                conn,
                self.tables,
                names,
                since=since,
                until=until,
                limit=limit,
                after=after,
                error=error,
            )

    async def dead_letter_summary(self, *, queue: str | None = None) -> list[DeadLetterSummary]:
        """Per queue with dead letters: how many, oldest, newest, most common errors."""
        await self._prepare()
        async with self._reads() as conn:
            names = await self._queues_or_one(conn, queue)
            found = [
                await dead_letters.dead_letter_summary(conn, self.tables, name, self.exact_up_to)
                for name in names
            ]
        return [summary for summary in found if summary is not None]

    async def paused_queues(self) -> list[str]:
        """The queues whose claims are paused (`pause_queue`)."""
        await self._prepare()
        async with self._reads() as conn:
            return await controls.paused_queues(conn, self.tables)

    async def breakers(self, queue: str | None = None) -> list[BreakerStatus]:
        """The circuit breakers that ever counted a failure, or `queue`'s alone (CLOSED
        if it never did), each with its last `RECENT_TRANSITIONS` changes of state."""
        if queue is not None:
            validate_queue_name(queue)
        await self._prepare()
        async with self._reads() as conn:
            return await controls.breaker_statuses(conn, self.tables, queue, RECENT_TRANSITIONS)

    async def breaker_history(
        self, queue: str, limit: int = 50, *, channel: str | None = None
    ) -> list[BreakerTransition]:
        """The last `limit` (at most 1,000) changes of state of `queue`'s breaker (or of
        its `channel`'s own), newest first."""
        validate_queue_name(queue)
        require_whole("limit", limit, MAX_PAGE)
        own = WHOLE_QUEUE if channel is None else limits.channel_name(channel)
        await self._prepare()
        async with self._reads() as conn:
            return await controls.breaker_history(conn, self.tables, queue, limit, own)

    # -- changing --------------------------------------------------------------------

    async def reset_breaker(self, queue: str, *, channel: str | None = None) -> bool:
        """Close `queue`'s circuit breaker (or its `channel`'s own) and forget its
        failures ("manual reset" in its history); every process claims again within one
        `CONTROL_INTERVAL` (a channel's: at the next claim). Whether it was open,
        half-open or counting failures."""
        validate_queue_name(queue)
        own = WHOLE_QUEUE if channel is None else limits.channel_name(channel)
        await self._prepare(writes=True)
        return await controls.reset_breaker(self.driver, self.engine, queue, own)

    async def pause_queue(self, queue: str) -> bool:
        """Stop every consumer of `queue`, in every process, from claiming its messages,
        within a few seconds (each reads the controls every `CONTROL_INTERVAL`); what
        they hold already is handled and settled as usual. Publishing goes on. A queue
        may be paused before it has messages. Whether it was running before."""
        validate_queue_name(queue)
        await self._prepare(writes=True)
        return await controls.set_paused(self.engine, self.tables, queue, True)

    async def resume_queue(self, queue: str) -> bool:
        """Let the consumers of `queue` claim again; whether it was paused."""
        validate_queue_name(queue)
        await self._prepare(writes=True)
        return await controls.set_paused(self.engine, self.tables, queue, False)

    async def purge(self, queue: str, *, progress: Progress | None = None) -> int:
        """Delete the queue's waiting messages (never those in flight); how many went."""
        await self._prepare(writes=True)
        async with reading(self.engine) as conn:
            await self._known_queue(conn, queue)
        return await messages.purge_queue(self.driver, self.engine, queue, progress)

    async def redrive(
        self,
        *,
        ids: Collection[int] | None = None,
        queue: str | None = None,
        all_queues: bool = False,
        error: str | None = None,
        progress: Progress | None = None,
        batch_size: int = MOVE_BATCH,
    ) -> MoveResult:
        """Dead letters back to their queues as new PENDING messages: by `ids`, every one
        of a `queue`, or every one of `all_queues`. The archive rows become REDRIVEN.

        Args:
            ids: archive ids to redrive.
            queue: redrive every dead letter of this queue.
            all_queues: redrive every dead letter of every queue.
            error: with `queue` or `all_queues`: only those whose last error starts
                with this.
            progress: called as rows move, with (done, total or None).
            batch_size: rows moved per transaction (default 500).
        """
        _one_choice("redrive", ids, queue, all_queues, error)
        chosen = _Chosen(ids, queue, all_queues, DEAD_STATES, None, None, error)
        return await self._move(chosen, progress, batch_size)

    async def redrive_count(
        self, *, queue: str | None = None, all_queues: bool = False, error: str | None = None
    ) -> Count:
        """How many dead letters `redrive` with the same `queue`, `all_queues` and
        `error` would move, counted up to `exact_up_to`: the preview before a move."""
        _one_choice("redrive", None, queue, all_queues, error, by_ids=False)
        chosen = _Chosen(None, queue, all_queues, DEAD_STATES, None, None, error)
        return await self._count_moves(chosen)

    async def replay(
        self,
        *,
        ids: Collection[int] | None = None,
        queue: str | None = None,
        all_queues: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
        states: Collection[MessageState | str] | None = None,
        error: str | None = None,
        progress: Progress | None = None,
        batch_size: int = MOVE_BATCH,
    ) -> MoveResult:
        """Archived messages in any final state back to their queues, as redrive does:
        by `ids`, or a `queue`'s (or every queue's) within [since, until), optionally
        only `states` and only those whose last error starts with `error`.

        Args:
            ids: archive ids to replay.
            queue: replay this queue's archived messages.
            all_queues: replay the archived messages of every queue.
            since: archived at or after this aware datetime (not with ids).
            until: archived before this aware datetime (not with ids).
            states: only messages archived in these states (default: every final one).
            error: only those whose last error starts with this (not with ids).
            progress: called as rows move, with (done, total or None).
            batch_size: rows moved per transaction (default 500).
        """
        chosen = self._replay_choice(ids, queue, all_queues, since, until, states, error)
        return await self._move(chosen, progress, batch_size)

    async def replay_count(
        self,
        *,
        queue: str | None = None,
        all_queues: bool = False,
        since: datetime | None = None,
        until: datetime | None = None,
        states: Collection[MessageState | str] | None = None,
        error: str | None = None,
    ) -> Count:
        """How many archived messages `replay` with the same filter would move, counted
        up to `exact_up_to`: the preview before a move."""
        if queue is None and not all_queues:
            raise InvalidOptionError("a replay count takes a queue or all_queues=True")
        chosen = self._replay_choice(None, queue, all_queues, since, until, states, error)
        return await self._count_moves(chosen)

    @staticmethod
    def _replay_choice(
        ids: Collection[int] | None,
        queue: str | None,
        all_queues: bool,
        since: datetime | None,
        until: datetime | None,
        states: Collection[MessageState | str] | None,
        error: str | None,
    ) -> _Chosen:
        if ids is not None:
            if queue is not None or all_queues:
                raise InvalidOptionError("replay takes exactly one of: ids, a queue or all_queues")
            if since or until or error is not None:
                raise InvalidOptionError("a replay by ids takes no time range and no error")
        elif (queue is None) == (not all_queues):
            raise InvalidOptionError("replay takes exactly one of: ids, a queue or all_queues")
        dead_letters.time_range(since, until)
        return _Chosen(
            ids, queue, all_queues, _states(states), since, until, _optional_text("error", error)
        )

    async def _count_moves(self, chosen: _Chosen) -> Count:
        await self._prepare()
        async with self._reads() as conn:
            names = await self._queues_or_one(conn, chosen.queue)
        ranges = dead_letters.move_ranges_of(
            names, chosen.states, chosen.since, chosen.until, chosen.error
        )
        async with self._reads() as conn:
            return await dead_letters.count_moves(conn, self.tables, ranges, self.exact_up_to)

    async def _move(
        self, chosen: _Chosen, progress: Progress | None, batch_size: int
    ) -> MoveResult:
        """Redrive and replay: `ids`, else every row of `queue` (None: of every queue)."""
        _batch_size(batch_size)
        await self._prepare(writes=True)
        if chosen.ids is not None:
            return await dead_letters.move_ids(
                self.driver, self.engine, _ids(chosen.ids), chosen.states, progress, batch_size
            )
        async with reading(self.engine) as conn:
            names = await self._queues_or_one(conn, chosen.queue)
        return await dead_letters.move_ranges(
            self.driver,
            self.engine,
            names,
            chosen.states,
            chosen.since,
            chosen.until,
            progress,
            batch_size,
            chosen.error,
        )

    async def prune_archive(
        self,
        older_than: timedelta,
        *,
        batch_size: int = PRUNE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Delete archive rows archived longer ago than `older_than`; how many went.

        Args:
            older_than: a positive timedelta.
            batch_size: rows deleted per transaction (default 1000).
            progress: called as rows go, with (done, total or None).
        """
        if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
            raise InvalidOptionError(
                f"older_than must be a positive timedelta, got {shown(older_than)}"
            )
        _batch_size(batch_size)
        await self._prepare(writes=True)
        return await archive.prune_archive(
            self.driver,
            self.engine,
            older_than.total_seconds(),
            batch_size=batch_size,
            progress=progress,
        )

    async def partition_archive(self, *, months_ahead: int = 3) -> partitions.PartitionReport:
        """PostgreSQL: make the archive partitioned by month of archived_at, keeping its
        rows (once; a partitioned archive is left as it is)."""
        await self._prepare(writes=True)
        return await partitions.partition_archive(
            self.engine, self.tables, months_ahead=months_ahead
        )

    async def maintain_archive(
        self, *, months_ahead: int = 3, retention: timedelta | None = None
    ) -> partitions.PartitionReport:
        """PostgreSQL, partitioned archive: create the coming months' partitions and drop
        those whose month ended more than `retention` ago."""
        await self._prepare(writes=True)
        return await partitions.maintain_partitions(
            self.engine, self.tables, months_ahead=months_ahead, retention=retention
        )

    # -- channels and limits -----------------------------------------------------------

    async def channels(self, queue: str) -> list[ChannelStatus]:
        """Every channel of `queue` that has a control row or live messages, by name:
        its ready, in-flight and later messages, whether it is paused, its own limits
        and those that apply (its own, else the queue's defaults for its channels).
        The counts are exact: one GROUP BY over the queue's live messages of a channel."""
        validate_queue_name(queue)
        await self._prepare()
        async with self._reads() as conn:
            return await limits.channel_statuses(conn, self.tables, queue)

    async def queue_limits(self, queue: str) -> QueueLimits:
        """`queue`'s own limits, its defaults for its channels, and whether it is paused
        (none, and running, for a queue nobody set)."""
        validate_queue_name(queue)
        await self._prepare()
        async with self._reads() as conn:
            return await limits.queue_limits(conn, self.tables, queue)

    async def set_channel_limits(
        self,
        queue: str,
        channel: str,
        *,
        max_concurrency: int | _Unset | None = UNSET,
        rate: RateLike | _Unset | None = UNSET,
    ) -> ChannelStatus:
        """Set one channel's own limits, which take the place of the queue's defaults
        for it; a limit not given stays as it is, None removes it. Every process's
        claims follow within a few seconds, without a restart (the channel claim reads
        the limits at each claim; a queue that had no channel and no limit is switched
        to it within `CONTROL_INTERVAL`). Bad values raise InvalidOptionError before
        anything is written. Returns the channel as `channels()` shows it.

        Args:
            queue: the queue.
            channel: the channel, as messages carry it (`channel="acme"`).
            max_concurrency: messages of the channel in flight at once, across every
                process (1 to 1,000,000).
            rate: claims of the channel per period: "5/s", "100/min", "10/30s", a
                `Rate`, or (count, seconds).
        """
        validate_queue_name(queue)
        name = limits.channel_name(channel)
        change = limits.channel_change(name, max_concurrency=max_concurrency, rate=rate)
        await self._prepare(writes=True)
        await limits.set_limits(self.driver, self.engine, queue, name, change)
        async with reading(self.engine) as conn:
            return await limits.channel_status(conn, self.tables, queue, name)

    async def set_queue_limits(
        self,
        queue: str,
        *,
        max_concurrency: int | _Unset | None = UNSET,
        rate: RateLike | _Unset | None = UNSET,
        channel_max_concurrency: int | _Unset | None = UNSET,
        channel_rate: RateLike | _Unset | None = UNSET,
    ) -> QueueLimits:
        """Set `queue`'s own limits, which hold across all its channels and its
        messages without one, and its defaults for each channel without limits of its
        own. As `set_channel_limits`: a limit not given stays, None removes it, bad
        values are refused before anything is written, and every process follows
        within a few seconds.

        Args:
            queue: the queue.
            max_concurrency: messages of the queue in flight at once, across every
                process.
            rate: claims of the queue per period (as `set_channel_limits` takes it).
            channel_max_concurrency: each channel's max_concurrency, unless it sets
                its own.
            channel_rate: each channel's rate, unless it sets its own.
        """
        validate_queue_name(queue)
        change = limits.queue_change(
            max_concurrency=max_concurrency,
            rate=rate,
            channel_max_concurrency=channel_max_concurrency,
            channel_rate=channel_rate,
        )
        await self._prepare(writes=True)
        await limits.set_limits(self.driver, self.engine, queue, WHOLE_QUEUE, change)
        async with reading(self.engine) as conn:  # the primary: a replica may lag the change
            return await limits.queue_limits(conn, self.tables, queue)

    async def pause_channel(self, queue: str, channel: str) -> bool:
        """Stop claims of one channel of `queue`, in every process, from the next claim
        on; its messages in flight finish as usual, the queue's other channels go on.
        Whether it was running before."""
        validate_queue_name(queue)
        name = limits.channel_name(channel)
        await self._prepare(writes=True)
        return await limits.set_channel_paused(self.driver, self.engine, queue, name, True)

    async def resume_channel(self, queue: str, channel: str) -> bool:
        """Let the channel be claimed again; whether it was paused."""
        validate_queue_name(queue)
        name = limits.channel_name(channel)
        await self._prepare(writes=True)
        return await limits.set_channel_paused(self.driver, self.engine, queue, name, False)

    # -- schedules -------------------------------------------------------------------

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        await self._prepare()
        async with self._reads() as conn:
            return await schedules.schedules(conn, self.tables)

    async def pause_schedule(self, name: str) -> ScheduleInfo:
        """Stop firing `name` until resumed; survives restarts (a declaration in code
        never unpauses it). Running processes notice within a second."""
        return await self._change_schedule(name, paused=True)

    async def resume_schedule(self, name: str) -> ScheduleInfo:
        """Fire `name` again from its next tick; the ticks it missed while paused are
        not fired."""
        return await self._change_schedule(name, paused=False)

    async def delete_schedule(self, name: str) -> None:
        """Remove `name`. A process that still declares it writes it again when it
        starts: remove it from the code first."""
        await self._prepare(writes=True)
        async with self.driver.own_transaction(self.engine) as conn:
            await schedules.delete(conn, self.tables, name)

    async def _change_schedule(self, name: str, *, paused: bool) -> ScheduleInfo:
        await self._prepare(writes=True)
        async with self.driver.own_transaction(self.engine) as conn:
            return await schedules.set_paused(conn, self.tables, name, paused=paused)

    # -- workers ---------------------------------------------------------------------

    async def workers(self, *, gone_after: float | None = None) -> list[WorkerInfo]:
        """Every broker process that registered and was not pruned, oldest start first:
        `alive`, or `gone` once silent for longer than `gone_after` seconds (by the
        database clock; default: each worker's own three refresh intervals). A gone row
        stays listed for an hour after its last refresh. A graceful stop removes its row."""
        threshold = workers.checked_gone_after(gone_after)
        await self._prepare()
        async with self._reads() as conn:
            return await workers.workers(conn, self.tables, threshold)

    # -- topics ----------------------------------------------------------------------

    async def bind(self, pattern: str, queue: str) -> bool:
        """Copy every message published to a topic `pattern` matches into `queue` from
        now on (docs/topics.md); whether the binding is new (binding twice is harmless).
        `*` matches one word of a topic, `#` zero or more."""
        await self._prepare(writes=True)
        return await topics.bind(self.driver, self.engine, pattern, queue)

    async def unbind(self, pattern: str, queue: str) -> bool:
        """Stop copying messages of `pattern`'s topics into `queue`; whether the binding
        existed. Messages already copied stay in the queue."""
        await self._prepare(writes=True)
        return await topics.unbind(self.driver, self.engine, pattern, queue)

    async def bindings(self, *, queue: str | None = None) -> list[Binding]:
        """Every binding (only `queue`'s, if given), by pattern then queue."""
        await self._prepare()
        async with self._reads() as conn:
            return await topics.bindings(conn, self.tables, queue=queue)

    async def route(self, topic: str) -> list[str]:
        """The queues a message published to `topic` now reaches, by name; `topic_route`
        names the webhook endpoints it reaches too."""
        return (await self.topic_route(topic)).queues

    async def topic_route(self, topic: str) -> TopicRoute:
        """Where a message published to `topic` goes now, read once: the bound queues
        and the enabled webhook endpoints with a pattern that matches it, by name."""
        await self._prepare()
        async with self._reads() as conn:
            return await topics.route(conn, self.driver, topic)

    # -- webhook endpoints (docs/webhooks.md) -------------------------------------------

    async def add_endpoint(
        self,
        name: str,
        url: str,
        *,
        topics: Sequence[str] = (),
        secret: str | None = None,
        max_concurrency: int | None = None,
        rate: RateLike | None = None,
        timeout: float = 30.0,
        headers: Mapping[str, str] | None = None,
        allow_private: bool = False,
        retry_schedule: Sequence[float] | None = None,
    ) -> NewSecret:
        """Add an HTTP endpoint that receives every message published to a topic one
        of `topics` matches, signed (Standard Webhooks) with `secret`, or with a new one
        when None. Returns the secret: the only time it is shown in full.

        Args:
            name: the endpoint's name; also its channel of the delivery queue.
            url: http:// or https://, no credentials in it (send them in `headers`).
            topics: topic patterns, as for queues (`*` one word, `#` zero or more).
            secret: `whsec_` and the base64 of 24 to 64 bytes.
            max_concurrency: its deliveries in flight at once, across every process.
            rate: its deliveries per period ("5/s", "100/min", ...).
            timeout: seconds a request may take (0.1 to 300).
            headers: extra request headers (not `webhook-*`, not hop-by-hop).
            allow_private: deliver to a host that resolves to a private, loopback or
                link-local address (refused otherwise).
            retry_schedule: seconds before each retry (at most 30, each at most a
                day); None: from 5 s to 10 h over seven retries.
        Raises InvalidEndpointError (bad values, a private address) or
        EndpointExistsError before anything is written."""
        await self._prepare(writes=True)
        return await webhook_endpoints.add_endpoint(
            self.driver, self.engine, name, url, topics=topics, secret=secret,
            max_concurrency=max_concurrency, rate=rate, timeout=timeout, headers=headers,
            allow_private=allow_private, retry_schedule=retry_schedule,
        )  # fmt: skip

    async def update_endpoint(
        self,
        name: str,
        *,
        url: str | _Unset = UNSET,
        timeout: float | _Unset = UNSET,
        headers: Mapping[str, str] | _Unset | None = UNSET,
        allow_private: bool | _Unset = UNSET,
        retry_schedule: Sequence[float] | _Unset | None = UNSET,
    ) -> Endpoint:
        """Change endpoint `name`'s settings: those given, the others as they are
        (`headers=None` removes its headers, `retry_schedule=None` restores the
        default). Its topics, secret and waiting deliveries stay; delivering processes
        apply the change within their `endpoint_refresh`. The values are those of
        `add_endpoint`, checked the same way before anything is written. Returns the
        endpoint as `endpoint()` shows it."""
        await self._prepare(writes=True)
        await webhook_endpoints.update_endpoint(
            self.driver, self.engine, name, url=url, timeout=timeout, headers=headers,
            allow_private=allow_private, retry_schedule=retry_schedule,
        )  # fmt: skip
        async with reading(self.engine) as conn:  # the primary: a replica may lag
            found = await webhook_endpoints.endpoints(conn, self.tables, [name])
        if not found:  # removed since
            raise UnknownEndpointError(f"no endpoint {shown(name)}")
        return found[0]

    async def endpoints(self) -> list[Endpoint]:
        """Every endpoint, by name; secrets shown by their first characters only."""
        await self._prepare()
        async with self._reads() as conn:
            return await webhook_endpoints.endpoints(conn, self.tables)

    async def endpoint(self, name: str) -> Endpoint:
        """One endpoint; UnknownEndpointError when there is none of that name."""
        await self._prepare()
        async with self._reads() as conn:
            found = await webhook_endpoints.endpoints(
                conn, self.tables, [webhook_endpoints.checked_name(name)]
            )
        if not found:
            raise UnknownEndpointError(f"no endpoint {shown(name)}")
        return found[0]

    async def disable_endpoint(self, name: str, reason: str = "disabled by an operator") -> bool:
        """Stop delivering to `name`: it gets no new deliveries and its pending ones
        wait (its channel is paused) until `enable_endpoint`. Whether it was enabled."""
        await self._prepare(writes=True)
        if not isinstance(reason, str) or not reason or "\x00" in reason:
            # NUL: PostgreSQL cannot store it
            raise InvalidEndpointError("reason must be a non-empty str without NUL characters")
        return await webhook_endpoints.set_endpoint_disabled(
            self.driver, self.engine, name, reason[:1000]
        )

    async def enable_endpoint(self, name: str) -> bool:
        """Deliver to `name` again, its waiting deliveries first; whether it was
        disabled."""
        await self._prepare(writes=True)
        return await webhook_endpoints.set_endpoint_disabled(self.driver, self.engine, name, None)

    async def remove_endpoint(self, name: str) -> int:
        """Delete endpoint `name`, its topics and its waiting deliveries; how many
        deliveries went (one in flight is dead-lettered when it finds no endpoint)."""
        await self._prepare(writes=True)
        return await webhook_endpoints.remove_endpoint(self.driver, self.engine, name)

    async def rotate_secret(
        self,
        name: str,
        *,
        secret: str | None = None,
        grace: timedelta = webhook_endpoints.DEFAULT_GRACE,
    ) -> NewSecret:
        """Give endpoint `name` a new secret (`secret`, or a new one); for `grace` the
        old one stays valid and deliveries carry both signatures, so the receiver can
        switch at any moment within it. Returns the new secret."""
        await self._prepare(writes=True)
        return await webhook_endpoints.rotate_secret(self.driver, self.engine, name, secret, grace)

    async def subscribe_endpoint(self, name: str, pattern: str) -> bool:
        """Send endpoint `name` the messages of topics `pattern` matches too; whether
        the pattern is new to it."""
        await self._prepare(writes=True)
        return await webhook_endpoints.subscribe(self.driver, self.engine, name, pattern)

    async def unsubscribe_endpoint(self, name: str, pattern: str) -> bool:
        """Stop sending endpoint `name` the topics of `pattern`; whether it had it."""
        await self._prepare(writes=True)
        return await webhook_endpoints.unsubscribe(self.driver, self.engine, name, pattern)

    async def attempts(self, message_id: int) -> list[Attempt]:
        """The HTTP attempts of webhook delivery `message_id`, oldest first (the latest
        100)."""
        await self._prepare()
        async with self._reads() as conn:
            return await webhook_endpoints.attempts(conn, self.tables, _id(message_id))

    # -- helpers ---------------------------------------------------------------------

    async def _known_queue(self, conn: AsyncConnection, queue: str) -> None:
        validate_queue_name(queue)
        if not await queue_reads.queue_exists(conn, self.tables, queue):
            raise UnknownQueueError(
                f"no queue {shown(queue)}: no message of it is queued or archived"
            )

    async def _queues_or_one(self, conn: AsyncConnection, queue: str | None) -> list[str]:
        if queue is None:
            return await queue_reads.queue_names(conn, self.tables, live=False)
        await self._known_queue(conn, queue)
        return [queue]


@dataclass(frozen=True)
class _Chosen:
    """What a redrive or replay moves: `ids`, else the rows of `queue` (None with
    `all_queues`: of every queue) in `states`, the time range, and with `error`."""

    ids: Collection[int] | None
    queue: str | None
    all_queues: bool
    states: Collection[MessageState]
    since: datetime | None
    until: datetime | None
    error: str | None


def _one_choice(
    action: str,
    ids: Collection[int] | None,
    queue: str | None,
    all_queues: bool,
    error: str | None,
    *,
    by_ids: bool = True,
) -> None:
    chosen = [ids is not None, queue is not None, all_queues is True]
    if sum(chosen) != 1:
        ways = "ids, a queue, or all_queues=True" if by_ids else "a queue or all_queues=True"
        raise InvalidOptionError(f"{action} takes exactly one of: {ways}")
    if ids is not None and error is not None:
        raise InvalidOptionError(f"a {action} by ids takes no error filter")
    _optional_text("error", error)


#: rows per transaction of a redrive, replay or prune, at most
MAX_BATCH = 10_000


def _batch_size(value: object) -> None:
    require_whole("batch_size", value, MAX_BATCH)


#: the longest text filter a read takes: longer than any key or id column holds
MAX_FILTER_TEXT = 1000


def _optional_text(name: str, value: object) -> str | None:
    if value is None:
        return None
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_FILTER_TEXT
        or not value.isprintable()
    ):
        msg = (
            f"{name} must be printable text of 1 to {MAX_FILTER_TEXT} characters, "
            f"got {shown(value)}"
        )
        raise InvalidOptionError(msg)
    return value


#: the largest id a message can have (the id columns are 64-bit)
MAX_MESSAGE_ID = 2**63 - 1


def _id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MESSAGE_ID:
        msg = f"a message id is a positive int of at most {MAX_MESSAGE_ID}, got {shown(value)}"
        raise InvalidOptionError(msg)
    return value


def _ids(values: Collection[int]) -> list[int]:
    ids = [_id(v) for v in values]
    if not ids:
        raise InvalidOptionError("no message ids given")
    return ids


def _states(states: Collection[MessageState | str] | None) -> tuple[MessageState, ...]:
    if states is None:
        return REPLAYABLE
    chosen = []
    for state in states:
        try:
            value = MessageState(state)
        except ValueError:
            value = None
        if value not in REPLAYABLE:
            names = ", ".join(s.value for s in REPLAYABLE)
            raise InvalidOptionError(f"cannot replay state {shown(state)}: choose from {names}")
        chosen.append(value)
    if not chosen:
        raise InvalidOptionError("no states given")
    return tuple(dict.fromkeys(chosen))
