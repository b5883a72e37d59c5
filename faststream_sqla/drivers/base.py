"""The one interface every database implements.

Each method is one SQL operation the queue needs; each driver module implements it
with the statements that suit its database. Code above this layer never asks which
database it talks to.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import json
import operator
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import micros_since_epoch, utc_now
from faststream_sqla.drivers._claim import keyed_messages
from faststream_sqla.drivers.catalogue import Catalogue, FilledCatalogue, load_catalogue
from faststream_sqla.drivers.claimed_rows import claimed_reader
from faststream_sqla.drivers.ranges import active_count
from faststream_sqla.message import KEEP_STATE, ClaimedMessage

if TYPE_CHECKING:
    from .channel_claim import ChannelClaim, ChannelSession
from faststream_sqla.schema import (
    CLAIMED_COLUMNS,
    INITIAL_COLUMNS,
    NOT_READY,
    PRIORITIES,
    PUBLISHED_COLUMNS,
    PUBLISHED_DEFAULTS,
    TOKEN_COLUMN,
    MessageColumn,
    MessageState,
    QueueTables,
    has_key_row,
)

T = TypeVar("T")
READY = (MessageState.PENDING, MessageState.RETRYABLE)
#: the states that move a message to the archive
TERMINAL = (MessageState.COMPLETED, MessageState.FAILED, MessageState.EXPIRED)

#: claimed columns that every row of one claim shares (the queue asked for, the claim's
#: time): drivers that can send them once do, and fill them in on the client
SHARED_CLAIM_COLUMNS = ("queue", "acquired_at")
#: PostgreSQL's "the server is shutting down or starting up" (admin_shutdown,
#: crash_shutdown, cannot_connect_now); connection exceptions are class 08
UNREACHABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03"})

#: idempotency keys looked up per statement (the drivers bound the parameters in one)
KEYS_PER_READ = 1000

#: positions of the claim order's columns in a claimed row
CLAIM_ORDER_POSITIONS = tuple(
    CLAIMED_COLUMNS.index(name) for name in ("priority", "next_attempt_at", "id")
)
_PRIORITY, _DUE, _ID = CLAIM_ORDER_POSITIONS


def claim_order(row: Sequence[Any]) -> tuple[Any, ...]:
    """Sort key of claimed rows (RETURNING gives them in no particular order): higher
    priority first, then ready time, then id."""
    return (-row[_PRIORITY], row[_DUE], row[_ID])


_DUE_AND_ID = operator.attrgetter("next_attempt_at", "id")
_PRIORITY_OF = operator.attrgetter("priority")


def sort_in_claim_order(messages: list[ClaimedMessage]) -> None:
    """Sort messages already read into `claim_order`, in place. Two stable passes whose
    keys are read in C: a Python key function was a call per claimed message, and the
    messages usually arrive in order already, which each pass checks in one walk."""
    messages.sort(key=_DUE_AND_ID)
    messages.sort(key=_PRIORITY_OF, reverse=True)  # stable: keeps each priority's order


@functools.cache
def _fields_of(fields: tuple[str, ...]) -> tuple[Callable[[Any], Any], Any]:
    getter = operator.attrgetter(*fields)
    return getter, (None if len(fields) == 1 else (None,) * len(fields))


def any_row_has(rows: Sequence[NewMessage], *fields: str) -> bool:
    """Whether any row has one of `fields` set (not None).

    Every publish asks this of its batch, so the scan runs in C (`map` and
    `list.count`): a generator here was resumed once per row."""
    getter, unset = _fields_of(fields)
    return list(map(getter, rows)).count(unset) != len(rows)


@dataclass(slots=True)
class NewMessage:
    """A validated, encoded message on its way into the table."""

    queue: str
    headers: dict[str, Any]
    headers_json: str
    payload: bytes
    correlation_id: str | None
    publish_at: datetime | None  # naive UTC; None means now + publish_delay
    publish_delay: float = 0.0
    expires_at: datetime | None = None  # naive UTC
    priority: int = 0
    ordering_key: str | None = None
    idempotency_key: str | None = None
    channel: str | None = None
    redriven_from: int | None = None  # set by redrive and replay only
    topic: str | None = None  # the topic of a copy a topic publish made for this queue

    @property
    def keyed(self) -> bool:
        """Has an ordering or idempotency key or a channel (on MySQL, a row in the keys
        table)."""
        return has_key_row(self.ordering_key, self.idempotency_key, self.channel)


@dataclass(slots=True)
class Outcome:
    """What one delivery ended with, ready to be written.

    `token` is the claims_count the message had when it was claimed: the write
    only applies while the row is still PROCESSING under that same delivery, so a
    worker whose claim was released and re-claimed elsewhere changes nothing.
    """

    id: int
    token: int
    state: MessageState
    attempts_count: int
    deliveries_count: int
    first_attempt_at: datetime | None = None
    last_attempt_at: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    #: the message has an ordering or idempotency key or a channel: archiving it also
    #: deletes its key row where the keys have a table of their own (MySQL)
    keyed: bool = False
    #: a deferral's saved state to write (encoded, None to clear), or KEEP_STATE
    saved_state: Any = KEEP_STATE

    @property
    def archives(self) -> bool:
        return self.state in TERMINAL


#: published columns an insert may leave out when no row sets them, with a getter each.
#: correlation_id is always sent: nearly every message has one, and "" is a value.
_OMITTABLE = tuple(
    (c.name, operator.attrgetter(c.published_attribute))
    for c in PUBLISHED_COLUMNS
    if c.name in PUBLISHED_DEFAULTS and c.name != "correlation_id"
)


@dataclass(frozen=True, eq=False)
class InsertShape:
    """Which published columns an insert sends per row. The others are not named at
    all: the table's own defaults (NULL, and priority's 0, declared by the schema and
    its migrations) fill them. Most batches set no option, and each column a row
    names costs the drivers that escape or bind it and the server that parses and
    evaluates it.

    Compared and hashed by identity: `_shape` makes one per set of columns, and the
    drivers' caches look a shape up on every publish, where a field-wise hash would
    hash each of its columns again."""

    #: the published columns sent, in PUBLISHED_COLUMNS order
    sent: tuple[MessageColumn, ...]
    #: a row's sent values, as a tuple
    values: Callable[[NewMessage], tuple[Any, ...]]

    @property
    def columns(self) -> tuple[MessageColumn, ...]:
        """The columns the insert names, in INSERTED_COLUMNS order: those sent, then
        the initial ones."""
        return self.sent + INITIAL_COLUMNS


@functools.lru_cache(maxsize=64)
def _shape(unused: frozenset[str]) -> InsertShape:
    sent = tuple(c for c in PUBLISHED_COLUMNS if c.name not in unused)
    return InsertShape(sent, operator.attrgetter(*(c.published_attribute for c in sent)))


def insert_shape(rows: Sequence[NewMessage]) -> InsertShape:
    """The shape of an insert of `rows`: an option column no row sets is left out (one
    pass in C per option column; a set option is truthy, its default is not)."""
    return _shape(frozenset(name for name, get in _OMITTABLE if not any(map(get, rows))))


#: execution options of a connection that only reads: where the broker makes every
#: transaction a writer's (SQLite's BEGIN IMMEDIATE), such a connection begins as a
#: reader instead, so it never waits behind another process's write
READS_ONLY = {"faststream_sqla_reads_only": True}


@asynccontextmanager
async def reading(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection for reads only (see READS_ONLY)."""
    async with engine.connect() as conn:
        yield await conn.execution_options(**READS_ONLY)


#: the bounds a bounded read takes, in seconds
READ_TIMEOUT_RANGE = (0.1, 300.0)


def timestamp_text(value: datetime | None) -> str | None:
    """One text form that PostgreSQL, MariaDB and SQLite all parse as a timestamp, and
    that sorts like SQLAlchemy's own SQLite storage format."""
    return None if value is None else value.isoformat(" ", "microseconds")


def attempt_micros(outcomes: Sequence[Outcome]) -> tuple[list[int | None], list[int | None]]:
    """Each outcome's first and last attempt times as microseconds since 1970. A first
    attempt's two times are one object, so it is converted once."""
    last = [micros_since_epoch(o.last_attempt_at) for o in outcomes]
    first = [
        us if o.first_attempt_at is o.last_attempt_at else micros_since_epoch(o.first_attempt_at)
        for o, us in zip(outcomes, last, strict=True)
    ]
    return first, last


def leases_document(leases: Sequence[tuple[int, int]]) -> str:
    """(id, token) pairs as a JSON array of [id, token] arrays."""
    return json.dumps(leases, separators=(",", ":"))


class StoredClaim(NamedTuple):
    """A message's claim as its row shows it: its token (`claims_count`) and whether it
    is PROCESSING."""

    token: int
    processing: bool


@dataclass(frozen=True)
class WakeupHooks:
    """What a wake-up source tells the broker. `on_queue(queue)` wakes the fetchers of
    a queue, `on_reconnect()` every one (after a gap in which publishes may have gone
    unheard); `consumes(queue)` says whether this process has a fetcher of a queue to
    wake. `noticed(exc)` is told of its failures, and is True when they need no line
    of their own (an outage, logged once elsewhere). A source that can look for due
    messages (drivers/watch.py) asks `due_checks()` which queues and how often, and
    tells `covering(True)` once it does, `covering(False)` when it stops."""

    on_queue: Callable[[str], None]
    on_reconnect: Callable[[], None]
    log: Callable[..., None]
    noticed: Callable[[BaseException], bool] = lambda _exc: False
    consumes: Callable[[str], bool] = lambda _queue: True
    due_checks: Callable[[], tuple[tuple[str, ...], float]] = lambda: ((), 0.0)
    covering: Callable[[bool], None] = lambda _covered: None


class NotificationListener(abc.ABC):
    """A database's wake-up source: hears about publishes from other processes and
    wakes this broker's fetchers of their queues (PostgreSQL's LISTEN; a watcher of new
    message ids on MariaDB and SQLite, `drivers/watch.py`). One per broker process."""

    @abc.abstractmethod
    async def start(self) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    async def wait_connects(self, count: int) -> None:
        """Wait until it has connected `count` times in all (it hears publishes from
        the first; each reconnect woke every queue)."""


@dataclass(frozen=True)
class SnapshotHolder:
    """The oldest transaction id a vacuum must keep rows for (`horizon`), and who holds
    it, for the log: a session's pid, state and when its transaction began (or the
    name of a replication slot or prepared transaction)."""

    horizon: str
    holder: str


class Driver(abc.ABC):
    """SQL for one database, built once per engine from our table definitions."""

    name: str = "base"
    #: whether settled messages leave dead index entries only a vacuum removes (the
    #: broker then runs `vacuum_message_table` now and then: faststream_sqla.vacuum)
    needs_vacuum: bool = False
    #: why this connection's user may not vacuum the message table (found at prepare),
    #: or None
    vacuum_denied: str | None = None
    #: statements one claim sends, each a wait for its reply. Where there are several,
    #: workers yield to the event loop at every delivery while a claim is in flight and
    #: the buffer runs low, so each reply is read at once (Fetcher.claim_in_flight).
    claim_round_trips: int = 1
    #: whether one transaction's commit can skip waiting for its durable write
    #: (PostgreSQL's synchronous_commit); elsewhere `relaxed` inserts are durable
    relaxes_commits: bool = False
    #: the package whose queries.sql holds this database's fixed statements by name
    queries_package: str | None = None
    _queries: FilledCatalogue | None = None

    def __init__(self, tables: QueueTables) -> None:
        self.tables = tables
        self._read_row = claimed_reader(times_as_text=self.times_as_text)
        m = tables.message
        # Where the table has ready_at (MySQL), "not ready" is one key of its index:
        # the in-flight rows, read without a scan of the queue's backlog.
        # The index leads with (queue, priority): every priority, named, keeps the
        # read to one range per priority.
        in_flight = (
            [
                m.c.priority.in_([sa.literal_column(str(p)) for p in PRIORITIES]),
                m.c.ready_at == sa.literal(NOT_READY, m.c.ready_at.type),
            ]
            if "ready_at" in m.c
            else []
        )
        self._active_count = active_count(m)
        self._release_stuck = (
            sa.update(m)
            .where(
                m.c.queue.in_(sa.bindparam("queues", expanding=True)),
                *in_flight,
                m.c.state == MessageState.PROCESSING,
                m.c.acquired_at < utc_now(-sa.bindparam("timeout", type_=sa.Float())),
                self.not_among(m.c.id, "held"),
            )
            .values(state=MessageState.PENDING, acquired_at=None)
        )

    # -- connection setup -------------------------------------------------------------
    def configure_engine(self, engine: AsyncEngine, *, owned: bool) -> None:  # noqa: B027
        """Tune an engine; `owned` is False for an engine the user passed in."""

    async def prepare(self, engine: AsyncEngine) -> None:  # noqa: B027
        """Read server settings the statements depend on, once at connect."""

    async def replica_lag(self, conn: AsyncConnection) -> float | None:
        """How many seconds the server behind `conn` is behind its primary: 0 when it
        has replayed all it received, or is not a replica; None when it cannot tell
        (its replication stopped; SQLite, which has no replicas)."""
        return None

    # -- bounded reads ----------------------------------------------------------------
    @asynccontextmanager
    async def bounded_reading(
        self, engine: AsyncEngine, seconds: float | None
    ) -> AsyncIterator[AsyncConnection]:
        """`reading(engine)` whose statements the database gives up on after `seconds`
        (None: no bound); the error it then raises is one `is_read_timeout` knows."""
        async with reading(engine) as conn:
            if seconds is None:
                yield conn
            else:
                async with self._bound_reads(conn, seconds):
                    yield conn

    def _bound_reads(
        self, conn: AsyncConnection, seconds: float
    ) -> AbstractAsyncContextManager[None]:
        """Bound every statement `conn` runs until the context ends (each database's)."""
        raise NotImplementedError(f"{self.name} does not bound its reads")

    def is_read_timeout(self, exc: BaseException) -> bool:
        """Whether `exc` is a read of `bounded_reading` given up on at its bound."""
        return False

    # -- operations -------------------------------------------------------------------
    @abc.abstractmethod
    async def claim(self, engine: AsyncEngine, queue: str, limit: int) -> list[ClaimedMessage]:
        """Mark up to `limit` ready messages of `queue` PROCESSING and return them,
        higher priority first, then oldest `next_attempt_at`. One statement or one
        short transaction."""

    def read_claimed(self, rows: Sequence[Sequence[Any]]) -> list[ClaimedMessage]:
        """Claimed rows (this driver's, in CLAIMED_COLUMNS order) as messages, each
        stamped with the same monotonic claim time."""
        now = time.monotonic()
        read = self._read_row
        return [read(row, now) for row in rows]

    @abc.abstractmethod
    async def write_outcomes(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        """Archive terminal outcomes and update the rest, in one transaction.
        Returns how many rows were changed (fenced, stale outcomes change nothing)."""

    @abc.abstractmethod
    async def extend_leases(self, engine: AsyncEngine, leases: Sequence[tuple[int, int]]) -> int:
        """Set acquired_at to now for held messages, given (id, token) pairs; fenced
        like outcomes. One statement for all of them."""

    async def save_states(self, engine: AsyncEngine, outcomes: Sequence[Outcome]) -> int:
        """Write the saved states of deferred messages, fenced like their outcomes (same
        claim, still claimed); written just before them. One statement for all: deferrals
        are rare beside plain outcomes, so they keep the outcome statements unchanged."""
        m = self.tables.message
        statement = (
            m.update()
            .where(
                m.c.id == sa.bindparam("b_id"),
                m.c[TOKEN_COLUMN] == sa.bindparam("b_token"),
                m.c.acquired_at.isnot(None),
            )
            .values(saved_state=sa.bindparam("b_state"))
        )
        rows = [{"b_id": o.id, "b_token": o.token, "b_state": o.saved_state} for o in outcomes]
        async with engine.begin() as conn:
            result = await conn.execute(statement, rows)
        return max(result.rowcount, 0)

    @abc.abstractmethod
    def not_among(self, column: sa.ColumnElement[int], name: str) -> sa.ColumnElement[bool]:
        """`column` is none of the ids bound as `name` (a value from `id_list`). One
        parameter whatever the count: an IN list of thousands would meet the drivers'
        limits on bound values."""

    def id_list(self, ids: Collection[int]) -> Any:
        """`ids` as the value of a `not_among` parameter: a JSON array by default."""
        return json.dumps(list(ids), separators=(",", ":"))

    def release_stuck_parameters(
        self, queues: Sequence[str], timeout_seconds: float, held: Collection[int]
    ) -> dict[str, Any]:
        return {"queues": list(queues), "timeout": timeout_seconds, "held": self.id_list(held)}

    async def count_active(self, conn: AsyncConnection, queue: str, at_most: int) -> int:
        """A queue's waiting and in-flight messages, counted up to `at_most` (each kind
        separately on databases that index them apart, so the result may reach three times
        that): enough to tell whether the queue is past a limit."""
        result = await conn.execute(self._active_count, {"probe_queue": queue, "at_most": at_most})
        return int(result.scalar_one())

    async def release_stuck(
        self,
        engine: AsyncEngine,
        queues: Sequence[str],
        timeout_seconds: float,
        held: Collection[int] = (),
    ) -> int:
        """Put PROCESSING messages claimed longer ago than the timeout back to PENDING,
        except those in `held`: the caller's process still holds them, however late its
        lease renewal is (an event loop blocked by a handler delays it)."""
        async with self.own_transaction(engine) as conn:
            result = await conn.execute(
                self._release_stuck, self.release_stuck_parameters(queues, timeout_seconds, held)
            )
            return result.rowcount or 0

    async def release_claims(self, engine: AsyncEngine, claims: Sequence[tuple[int, int]]) -> int:
        """Put back to PENDING the messages still PROCESSING under these very claims,
        given as (id, token) pairs: fenced like outcomes, so a message claimed again
        since (its token moved on) or settled is left alone. Returns how many were."""
        m = self.tables.message
        released = 0
        async with self.own_transaction(engine) as conn:
            for start in range(0, len(claims), RELEASE_CHUNK):
                chunk = claims[start : start + RELEASE_CHUNK]
                result = await conn.execute(
                    sa.update(m)
                    .where(
                        # the ids alone first: one look-up of the primary key each
                        m.c.id.in_([claim_id for claim_id, _ in chunk]),
                        sa.tuple_(m.c.id, m.c[TOKEN_COLUMN]).in_(chunk),
                        m.c.state == MessageState.PROCESSING,
                    )
                    .values(state=MessageState.PENDING, acquired_at=None)
                )
                released += max(result.rowcount or 0, 0)
        return released

    async def stored_claims(
        self, engine: AsyncEngine, ids: Sequence[int]
    ) -> dict[int, StoredClaim]:
        """The claim each of these messages' rows shows, by id; a message whose row is
        gone (settled, or never reached this server) is left out. A read only."""
        m = self.tables.message
        found: dict[int, StoredClaim] = {}
        async with reading(engine) as conn:
            for start in range(0, len(ids), RELEASE_CHUNK):
                chunk = ids[start : start + RELEASE_CHUNK]
                result = await conn.execute(
                    sa.select(m.c.id, m.c[TOKEN_COLUMN], m.c.state).where(m.c.id.in_(chunk))
                )
                for row_id, token, state in result:
                    found[row_id] = StoredClaim(token, state == MessageState.PROCESSING)
        return found

    @abc.abstractmethod
    async def insert_messages(self, conn: AsyncConnection, rows: Sequence[NewMessage]) -> list[int]:
        """Insert messages on the caller's connection (and so its transaction); ids in
        row order. One statement per batch where the driver allows. Where the database can
        wake consumers in other processes, the insert tells them (at commit)."""

    async def find_idempotency_keys(
        self, conn: AsyncConnection, queue: str, keys: Sequence[str], *, latest: bool = False
    ) -> dict[str, tuple[int, bytes]]:
        """The id and payload of each message of `queue` that holds one of `keys`.
        `latest`: read the newest committed rows even inside an older snapshot (after
        losing a race to a publisher that committed since)."""
        k = keyed_messages(self.tables)
        found: dict[str, tuple[int, bytes]] = {}
        for start in range(0, len(keys), KEYS_PER_READ):
            stmt = (
                sa.select(k.keys.c.id, k.keys.c.idempotency_key, k.message.c.payload)
                .select_from(k.source)
                .where(
                    k.keys.c.queue == queue,
                    k.keys.c.idempotency_key.in_(keys[start : start + KEYS_PER_READ]),
                )
            )
            result = await conn.execute(self.latest_rows(stmt) if latest else stmt)
            found.update((key, (message_id, bytes(payload))) for message_id, key, payload in result)
        return found

    async def first_of_keys(
        self, conn: AsyncConnection, queue: str, keys: Sequence[str]
    ) -> list[int]:
        """The id of the first message (lowest id) of each ordering key of `queue` that
        has one, from the ordering-key index."""
        k = keyed_messages(self.tables)
        result = await conn.execute(
            sa.select(sa.func.min(k.keys.c.id))
            .select_from(k.source)
            .where(k.keys.c.queue == queue, k.keys.c.ordering_key.in_(keys))
            .group_by(k.keys.c.ordering_key)
        )
        return list(result.scalars())

    def latest_rows(self, stmt: sa.Select) -> sa.Select:
        """`stmt`, reading the newest committed rows: each statement already does under
        READ COMMITTED, where the broker's own transactions run."""
        return stmt

    async def insert_committed(
        self, engine: AsyncEngine, rows: Sequence[NewMessage], *, relaxed: bool = False
    ) -> list[int]:
        """Insert in a transaction of its own, committed on return. `relaxed`: the
        commit need not wait for the write to reach disk, where `relaxes_commits`."""
        async with self.own_transaction(engine) as conn:
            return await self.insert_messages(conn, rows)

    def own_transaction(self, engine: AsyncEngine) -> AbstractAsyncContextManager[AsyncConnection]:
        """A transaction the broker opens for itself (not a caller's), committed on exit."""
        return engine.begin()

    def channel_transaction(
        self, engine: AsyncEngine
    ) -> AbstractAsyncContextManager[AsyncConnection]:
        """The channel claim's transaction (faststream_sqla.channels.claim): each of its
        statements must see what committed before it began."""
        return self.own_transaction(engine)

    #: whether a channel claim's read may be made ahead of its write, while the
    #: workers handle what the claim before took (channels.read_ahead): not where the
    #: claim's session holds the database's one writer lock
    reads_channels_ahead = True

    #: the driver returns stored times as text, not datetimes (claimed_rows.claimed_reader)
    times_as_text = False

    #: the channel claim's statements and session for this database (its
    #: `<database>/channel_claim.py`)
    channel_claim_type: type[ChannelClaim]

    def channel_session(self, engine: AsyncEngine) -> AbstractAsyncContextManager[ChannelSession]:
        """A channel claim's read, then its write, on one connection. Each database
        runs them on its own connection (see its channel_claim.py); the write's version
        check covers whatever happened in between."""
        return self.channel_claim.session(engine)

    @functools.cached_property
    def channel_claim(self) -> ChannelClaim:
        """The channel claim's statements for these tables, built on first use."""
        return self.channel_claim_type(self)

    async def vacuum_message_table(self, engine: AsyncEngine) -> float:
        """Remove the dead entries of settled messages from the message table and its
        indexes; returns the table's estimated row count. Only where `needs_vacuum`."""
        raise NotImplementedError

    async def oldest_snapshot(self, engine: AsyncEngine) -> SnapshotHolder | None:
        """What holds back the removal of dead rows from the message table: the oldest
        snapshot or transaction of another session (or slot, or prepared transaction),
        or None if nothing does. Only where `needs_vacuum`."""
        raise NotImplementedError

    def listener(
        self,
        engine: AsyncEngine,
        hooks: WakeupHooks,
    ) -> NotificationListener | None:
        """This database's cross-process wake-up source, telling `hooks`, or None where
        it has none."""
        return None

    @abc.abstractmethod
    def is_transient(self, exc: BaseException) -> bool:
        """Whether retrying the same statement may succeed (deadlock, busy, lock timeout)."""

    @abc.abstractmethod
    def is_disconnect(self, exc: BaseException) -> bool:
        """Whether the error means the connection was lost."""

    def is_unreachable(self, exc: BaseException) -> bool:
        """Whether the error means the database cannot be reached at all (refused, reset,
        shutting down or starting up, a lost connection), in whatever form the driver
        or SQLAlchemy raised it: the error itself, its `orig`, or what it was raised
        from."""
        seen: set[int] = set()
        todo: list[BaseException | None] = [exc]
        while todo:
            e = todo.pop()
            if e is None or id(e) in seen or len(seen) > 8:
                continue
            seen.add(id(e))
            if isinstance(e, OSError) or self.is_disconnect(e) or self._cannot_open(e):
                return True
            if (sqlstate(e) or "") in UNREACHABLE_SQLSTATES:
                return True
            todo += (getattr(e, "orig", None), e.__cause__, e.__context__)
        return False

    def _cannot_open(self, exc: BaseException) -> bool:
        """The embedded database's file cannot be opened (SQLite)."""
        return False

    def _q(self, engine: AsyncEngine | AsyncConnection, table: sa.Table) -> str:
        return engine.dialect.identifier_preparer.format_table(table)

    def _sql(self, engine: AsyncEngine | AsyncConnection, name: str) -> str:
        """The catalogue's statement `name` with this driver's quoted table names in.

        The catalogue is filled on first use and kept: one driver serves one database,
        so its quoted names never change."""
        if self._queries is None:
            tables = {
                attribute: self._q(engine, table)
                for attribute, table in vars(self.tables).items()
                if isinstance(table, sa.Table)
            }
            self._queries = self._catalogue.filled(tables)
        return self._queries[name]

    @property
    def _catalogue(self) -> Catalogue:
        assert self.queries_package is not None, f"{type(self).__name__} has no catalogue"
        return load_catalogue(self.queries_package)


#: claims per statement of `release_claims`: three bound values each, under the
#: 999 that older SQLite builds allow
RELEASE_CHUNK = 300


async def with_retries(
    driver: Driver, operation: Callable[[], Awaitable[T]], *, attempts: int = 5
) -> T:
    """Run `operation` again after deadlocks, busy errors and lost connections, a
    bounded number of times.

    A lost connection is dropped from the pool by SQLAlchemy, so the retry gets a fresh
    one: this replaces a liveness ping on every checkout. Only for operations that own
    their whole transaction: a statement inside a caller's transaction cannot be
    retried on its own.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await operation()
        except Exception as exc:
            if attempt == attempts or not (driver.is_transient(exc) or driver.is_unreachable(exc)):
                raise
            await asyncio.sleep(min(0.01 * 2**attempt, 0.5) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def sqlstate(exc: BaseException) -> str | None:
    orig = getattr(exc, "orig", None) or exc
    for attr in ("sqlstate", "pgcode"):
        if code := getattr(orig, attr, None):
            return str(code)
    return None
