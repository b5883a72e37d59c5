"""Our tables, defined once, and the check that the database holds them.

Everything that touches the database takes its table and column objects from
`QueueTables`, so table names are configurable and no identifier is ever built
from user input.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from .clock import utc_now
from .exceptions import shown
from .topics import MAX_TOPIC_LENGTH

MAX_QUEUE_NAME_LENGTH = 255
MAX_CORRELATION_ID_LENGTH = 255
#: ordering and idempotency keys are text of at most this many characters
MAX_KEY_LENGTH = 255
#: message priorities, higher first; 0 is the default
MIN_PRIORITY, MAX_PRIORITY = 0, 10
#: every priority, in the order a claim takes them
PRIORITIES = tuple(range(MAX_PRIORITY, MIN_PRIORITY - 1, -1))
DEFAULT_MESSAGE_TABLE = "message"
DEFAULT_ARCHIVE_TABLE = "message_archive"
VERSION_TABLE = "faststream_sqla_version"


class MessageState(str, enum.Enum):
    """Where a message is in its life. Stored by name."""

    PENDING = "PENDING"
    """Waiting in the queue for its time (`next_attempt_at`) and a consumer."""
    WAITING = "WAITING"
    """Behind an earlier message of its ordering key; PENDING once that one settles
    (faststream_sqla.ordering). Out of the claim index, like PROCESSING."""
    PROCESSING = "PROCESSING"
    """Claimed by a consumer, under a lease that consumer renews."""
    RETRYABLE = "RETRYABLE"
    """Failed or nacked, due again at `next_attempt_at`."""
    COMPLETED = "COMPLETED"
    """Archive only: handled and acknowledged."""
    FAILED = "FAILED"
    """Archive only: rejected, or out of attempts or deliveries (a dead letter)."""
    EXPIRED = "EXPIRED"
    """Archive only: past its `expires_at` before a handler got it; never handled."""
    REDRIVEN = "REDRIVEN"
    """Archive only: copied back to the queue by a redrive or replay
    (faststream_sqla.admin)."""


#: archive states of messages that did not complete: the dead letters
DEAD_STATES = (MessageState.FAILED, MessageState.EXPIRED)


# Portable column types. BigInteger ids do not auto-increment on SQLite, so they
# become INTEGER (the rowid alias) there; payloads must hold 16 MiB everywhere
# (MEDIUMBLOB stops one byte short); MySQL DATETIME needs fsp=6 for sub-second times.
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Payload = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")
Timestamp = sa.DateTime(timezone=False).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
State = sa.Enum(
    MessageState,
    name="sqla_message_state",
    native_enum=False,
    create_constraint=False,
    length=16,
    validate_strings=True,
)
Headers = sa.JSON()
#: the same storage as Payload, but a type of its own: claims pass it through as the
#: driver returns it (None for most messages) and SqlaMessage.saved_state converts it
SavedState = sa.LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")
ErrorText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")


@dataclass(frozen=True)
class TableNames:
    message: str = DEFAULT_MESSAGE_TABLE
    archive: str = DEFAULT_ARCHIVE_TABLE

    def __post_init__(self) -> None:
        from .exceptions import InvalidOptionError

        if self.message == self.archive:
            msg = f"message and archive tables need different names, both are {shown(self.message)}"
            raise InvalidOptionError(msg)
        for derived in (
            keys_table_name(self.message),
            controls_table_name(self.message),
            schedule_table_name(self.message),
            breaker_events_table_name(self.message),
            workers_table_name(self.message),
            bindings_table_name(self.message),
            endpoints_table_name(self.message),
            endpoint_topics_table_name(self.message),
            attempts_table_name(self.message),
        ):
            if self.archive == derived:
                msg = (
                    f"archive table {shown(self.archive)} would share its name with "
                    f"{shown(derived)}"
                )
                raise InvalidOptionError(msg)
        for value in (self.message, self.archive):
            if not value or not value.replace("_", "").isalnum() or len(value) > 48:
                msg = f"table name {shown(value)} must be 1-48 letters, digits or underscores"
                raise InvalidOptionError(msg)


#: SQLAlchemy dialect names of the databases without partial indexes
MYSQL_FAMILY = ("mysql", "mariadb")


def exact_collation(mariadb: bool) -> str:
    """The MySQL/MariaDB collation under which queue names and keys compare as on
    PostgreSQL and SQLite: byte for byte, trailing spaces included (revisions 0007, 0008)."""
    return "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"


#: ready_at of a message that may not be claimed (in flight): the last DATETIME
NOT_READY = datetime(9999, 12, 31, 23, 59, 59)
#: ready_at of a ready message of a channel: the plain claim never reaches it, and
#: release-stuck's range (NOT_READY) leaves it out; the channel claim finds it through
#: the keys table (faststream_sqla.channels)
CHANNEL_READY = datetime(9999, 12, 30)

#: when a message without a channel may be claimed, NOT_READY while it may not, and
#: CHANNEL_READY for a ready message of a channel: MySQL's stand-in for the partial
#: claim index of PostgreSQL and SQLite (see build_message_table)
READY_AT_SQL = (
    "CASE WHEN state IN ('PENDING', 'RETRYABLE') AND channel IS NULL THEN next_attempt_at "
    "WHEN state IN ('PENDING', 'RETRYABLE') THEN TIMESTAMP'9999-12-30 00:00:00' "
    "ELSE TIMESTAMP'9999-12-31 23:59:59' END"
)


@dataclass
class QueueTables:
    """The `message` and `message_archive` tables under the configured names, as the
    database `dialect` (a SQLAlchemy dialect name) holds them; None means one with
    partial indexes, as PostgreSQL and SQLite."""

    names: TableNames = field(default_factory=TableNames)
    dialect: str | None = None
    metadata: sa.MetaData = field(init=False)
    message: sa.Table = field(init=False)
    archive: sa.Table = field(init=False)
    #: MySQL and MariaDB only: the keys of the keyed messages (build_keys_table)
    keys: sa.Table | None = field(init=False)
    #: what operators set per queue, and each queue's breaker (build_controls_table)
    controls: sa.Table = field(init=False)
    #: the interval and cron schedules (build_schedule_table)
    schedule: sa.Table = field(init=False)
    #: every change of a breaker's state (build_breaker_events_table)
    breaker_events: sa.Table = field(init=False)
    #: one row per running broker process (build_workers_table)
    workers: sa.Table = field(init=False)
    #: which topic patterns reach which queues (build_bindings_table)
    bindings: sa.Table = field(init=False)
    #: the HTTP endpoints webhooks are delivered to (build_endpoints_table)
    endpoints: sa.Table = field(init=False)
    #: which topic patterns reach which endpoints (build_endpoint_topics_table)
    endpoint_topics: sa.Table = field(init=False)
    #: every HTTP attempt of a webhook delivery (build_attempts_table)
    attempts: sa.Table = field(init=False)

    def __post_init__(self) -> None:
        built = _built_tables(self.names, self.dialect in MYSQL_FAMILY)
        self.metadata, self.message, self.archive = built.metadata, built.message, built.archive
        self.keys, self.controls, self.schedule = built.keys, built.controls, built.schedule
        self.breaker_events, self.workers = built.breaker_events, built.workers
        self.bindings, self.endpoints = built.bindings, built.endpoints
        self.endpoint_topics, self.attempts = built.endpoint_topics, built.attempts

    @property
    def key_index(self) -> sa.Table:
        """The table whose indexes find messages by ordering or idempotency key: the
        keys table where there is one, else the message table. Both have id, queue,
        ordering_key and idempotency_key."""
        return self.message if self.keys is None else self.keys

    @property
    def live(self) -> tuple[sa.Table, ...]:
        """The tables that hold messages not yet archived: deleting a message deletes
        its row from each (the keys table first)."""
        return (self.message,) if self.keys is None else (self.keys, self.message)

    def for_dialect(self, dialect: str) -> QueueTables:
        """These tables as `dialect` holds them (self when that is the same shape)."""
        if (dialect in MYSQL_FAMILY) == (self.dialect in MYSQL_FAMILY):
            return self
        return QueueTables(self.names, dialect)


class _BuiltTables(NamedTuple):
    metadata: sa.MetaData
    message: sa.Table
    archive: sa.Table
    keys: sa.Table | None
    controls: sa.Table
    schedule: sa.Table
    breaker_events: sa.Table
    workers: sa.Table
    bindings: sa.Table
    endpoints: sa.Table
    endpoint_topics: sa.Table
    attempts: sa.Table


@functools.lru_cache(maxsize=64)
def _built_tables(names: TableNames, mysql_family: bool) -> _BuiltTables:
    """The tables of one set of names and shape, shared while cached: every broker,
    driver and admin API on the same tables reads the same `sa.Table` objects, which
    nothing changes once built. Built anew per broker, they cost each construction
    time, and every full garbage collection a walk over thousands more objects."""
    metadata = sa.MetaData()
    return _BuiltTables(
        metadata,
        build_message_table(metadata, names.message, ready_at_column=mysql_family),
        build_archive_table(metadata, names.archive),
        build_keys_table(metadata, names.message) if mysql_family else None,
        build_controls_table(metadata, names.message),
        build_schedule_table(metadata, names.message),
        build_breaker_events_table(metadata, names.message),
        build_workers_table(metadata, names.message),
        build_bindings_table(metadata, names.message),
        build_endpoints_table(metadata, names.message),
        build_endpoint_topics_table(metadata, names.message),
        build_attempts_table(metadata, names.message),
    )


class Initial(str, enum.Enum):
    """A column's value in a new row when the publisher does not give it, per database."""

    NOW = "now"  # the database clock at insert
    DUE = "due"  # the publisher's time, or now plus its delay


@dataclass(frozen=True)
class MessageColumn:
    """One column of the message table, declared once.

    The tables are built from these, and so are the statements that insert, claim and
    archive messages: a new message option is one entry here (plus its migration), a
    field of the same name on `NewMessage` when publishers set it, and on
    `ClaimedMessage` when handlers read it.
    """

    name: str
    type: sa.types.TypeEngine
    nullable: bool = True
    #: the `NewMessage` attribute a publish fills it from; None: `initial` fills it
    published_as: str | None = None
    #: SQL every database reads (a literal), an `Initial`, or None for NULL
    initial: str | Initial | None = None
    #: the same for most messages of one publish call: inserts may send it once per run
    #: of equal values instead of once per message
    shared: bool = False
    #: returned by a claim: a field of the same name on `ClaimedMessage`, in this order
    claimed: bool = True
    #: kept in the archive when the message settles
    archived: bool = True
    #: in the archive, the outcome's value (each dialect says where it reads that)
    settled: bool = False
    #: counted up by every claim (the claimed row carries the new value)
    counts_claims: bool = False

    @property
    def published_attribute(self) -> str:
        """`published_as` of a published column, for code that handles only those."""
        if self.published_as is None:
            raise TypeError(f"column {self.name!r} is not filled by publishers")
        return self.published_as


#: every column of the message table. Claimed columns come first, in the order of
#: `ClaimedMessage`'s fields (`drivers.claimed_rows` builds one positionally).
MESSAGE_COLUMNS: tuple[MessageColumn, ...] = (
    MessageColumn("id", Id, nullable=False),
    MessageColumn(
        "queue", sa.String(MAX_QUEUE_NAME_LENGTH), nullable=False, published_as="queue", shared=True
    ),
    MessageColumn("headers", Headers, published_as="headers_json", shared=True),
    MessageColumn("payload", Payload, nullable=False, published_as="payload"),
    MessageColumn("attempts_count", sa.Integer(), nullable=False, initial="0", settled=True),
    MessageColumn(
        "deliveries_count", sa.Integer(), nullable=False, initial="0", counts_claims=True
    ),
    MessageColumn("created_at", Timestamp, nullable=False, initial=Initial.NOW),
    MessageColumn(
        "next_attempt_at", Timestamp, nullable=False, initial=Initial.DUE, archived=False
    ),
    MessageColumn("acquired_at", Timestamp, archived=False),
    MessageColumn("first_attempt_at", Timestamp, settled=True),
    MessageColumn("last_attempt_at", Timestamp, settled=True),
    MessageColumn(
        "correlation_id", sa.String(MAX_CORRELATION_ID_LENGTH), published_as="correlation_id"
    ),
    # The claim token: unlike deliveries_count it never goes down (a message given back
    # unstarted keeps it), so no two claims of a message share one, unless a failover
    # lost a claim: the next claim of that row counts to its token again (recovery.py).
    MessageColumn("claims_count", sa.Integer(), nullable=False, initial="0", counts_claims=True),
    MessageColumn("expires_at", Timestamp, published_as="expires_at"),
    MessageColumn(
        "priority", sa.SmallInteger(), nullable=False, published_as="priority", initial="0"
    ),
    # Messages of one ordering key are claimed one at a time, in id order: a claim
    # passes over a message while an earlier one of its key is still in this table.
    MessageColumn("ordering_key", sa.String(MAX_KEY_LENGTH), published_as="ordering_key"),
    # Unique per queue among the messages in this table (ux_<table>_idempotency).
    # Claimed: an outcome must know whether its message has a key row to delete (MySQL).
    MessageColumn("idempotency_key", sa.String(MAX_KEY_LENGTH), published_as="idempotency_key"),
    # The channel (a tenant, a customer, an API) whose limits and turn in the rotation
    # the message waits for (faststream_sqla.channels); the plain claim never takes it.
    MessageColumn("channel", sa.String(MAX_KEY_LENGTH), published_as="channel"),
    # What a handler saved when it deferred the message (SqlaMessage.defer): the next
    # delivery reads it. Tagged bytes (message.encode_saved_state); not archived.
    MessageColumn("saved_state", SavedState, archived=False),
    MessageColumn("state", State, nullable=False, initial="'PENDING'", claimed=False, settled=True),
    MessageColumn("last_error", ErrorText, claimed=False, settled=True),
    # The archived message a redrive or replay copied this one from (its archive row
    # points back with redriven_to).
    MessageColumn("redriven_from", Id, claimed=False, published_as="redriven_from"),
    # The topic a message was published to (faststream_sqla.topics), on each queue's
    # copy. Not claimed: a handler reads it from the message's headers
    # (message.TOPIC_HEADER), so claims of messages without one pay nothing for it.
    MessageColumn(
        "topic", sa.String(MAX_TOPIC_LENGTH), claimed=False, published_as="topic", shared=True
    ),
)
MESSAGE_COLUMN = {c.name: c for c in MESSAGE_COLUMNS}
#: the columns a claim returns, in `ClaimedMessage` order
CLAIMED_COLUMNS = tuple(c.name for c in MESSAGE_COLUMNS if c.claimed)
#: the columns a publish fills from `NewMessage`, then those filled with their initial
#: value: an insert lists them in this order, so a row's parameters are one attrgetter
#: call and the initials the client computes (`CLIENT_INITIALS`)
PUBLISHED_COLUMNS = tuple(c for c in MESSAGE_COLUMNS if c.published_as)
INITIAL_COLUMNS = tuple(c for c in MESSAGE_COLUMNS if c.initial is not None and not c.published_as)
INSERTED_COLUMNS = PUBLISHED_COLUMNS + INITIAL_COLUMNS
#: published columns a message may leave at a default, with that default as a Python
#: value (None: NULL): an insert whose rows all leave one so need not send it per row
PUBLISHED_DEFAULTS: dict[str, int | None] = {
    c.name: None if c.initial is None else int(c.initial)
    for c in PUBLISHED_COLUMNS
    if c.nullable or c.initial is not None
}
#: the initials that depend on the time, in INITIAL_COLUMNS order
CLIENT_INITIALS = tuple(c.initial for c in INITIAL_COLUMNS if isinstance(c.initial, Initial))
assert CLIENT_INITIALS == (Initial.NOW, Initial.DUE), "inserts compute these two, in order"
#: the columns every claim counts up, and the one that fences outcomes and renewals
CLAIM_COUNTERS = tuple(c.name for c in MESSAGE_COLUMNS if c.counts_claims)
TOKEN_COLUMN = "claims_count"
#: the archive's columns, without archived_at
ARCHIVED_COLUMNS = tuple(c.name for c in MESSAGE_COLUMNS if c.archived)


def archive_copy(settled: dict[str, str], row: str = "m") -> tuple[list[str], list[str]]:
    """The archive's columns and, for each, the SQL that fills it when a message
    settles: `settled[name]` for the outcome's columns, else the message `row`'s own.
    archived_at is the caller's to add."""
    values = [settled[n] if MESSAGE_COLUMN[n].settled else f"{row}.{n}" for n in ARCHIVED_COLUMNS]
    return list(ARCHIVED_COLUMNS), values


def _columns(names: tuple[str, ...]) -> list[sa.Column]:
    columns = []
    for column in (MESSAGE_COLUMN[n] for n in names if n != "id"):
        # counters start at 0 for rows inserted by hand too (tests, tools), as the
        # migrations that add them declare
        zero = column.initial == "0"
        columns.append(
            sa.Column(
                column.name,
                column.type,
                nullable=column.nullable,
                default=0 if zero else None,
                server_default=sa.text("0") if zero else None,
            )
        )
    return columns


def build_message_table(
    metadata: sa.MetaData, name: str, *, ready_at_column: bool = False
) -> sa.Table:
    ready = "state IN ('PENDING', 'RETRYABLE')"
    processing = sa.text("state = 'PROCESSING'")
    extra = (
        # Stored, not virtual: purging a deleted row then needs no recomputation, and
        # MariaDB's indexes on virtual columns have a history of bugs.
        [sa.Column("ready_at", Timestamp, sa.Computed(READY_AT_SQL, persisted=True))]
        if ready_at_column
        else []
    )
    table = sa.Table(
        name,
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        *_columns(tuple(c.name for c in MESSAGE_COLUMNS)),
        *extra,
        # Ids must never be reused: an archived id would collide in the archive.
        sqlite_autoincrement=True,
    )
    if ready_at_column:
        # MySQL has no partial indexes. One index on (queue, ready_at, id) does the work
        # of both below: the claim walks the ready rows in order and stops at LIMIT
        # (in-flight rows sit at NOT_READY, past every real time), and release-stuck
        # reads only the in-flight rows (ready_at = NOT_READY). With the two plain
        # composites instead, every claim walked and locked the in-flight rows at the
        # head of the queue, and every claim, archive and purge also maintained an index
        # on acquired_at. Not NULL for "not ready": NULLs sort first, so each claim would
        # start by walking the in-flight rows and every not yet purged entry of the
        # rows archived before it.
        # Priority comes second: a claim reads each priority as its own range, so the
        # not yet due rows of one priority never stand in front of another's due ones.
        sa.Index(f"ix_{name}_ready", table.c.queue, table.c.priority, table.c.ready_at, table.c.id)
        # No key indexes here: without partial indexes they would hold an entry for
        # every message, keyed or not; the keys table holds them (build_keys_table).
        return table
    # The claim walks (queue, next_attempt_at) in order and stops at LIMIT; in-flight
    # rows, and the messages of channels, are left out of the index entirely.
    plain_ready = sa.text(f"{ready} AND channel IS NULL")
    sa.Index(
        f"ix_{name}_claim",
        table.c.queue,
        table.c.priority,  # one range per priority (see _claim.ready_ids)
        table.c.next_attempt_at,
        table.c.id,  # the claim orders by (next_attempt_at, id): no sort on any backlog
        postgresql_where=plain_ready,
        sqlite_where=plain_ready,
    )
    # The channel claim (faststream_sqla.channels): which channels have ready messages
    # (one descent per channel), and each one's oldest due ones.
    channel_ready = sa.text(f"{ready} AND channel IS NOT NULL")
    sa.Index(
        f"ix_{name}_channel",
        table.c.queue,
        table.c.channel,
        table.c.next_attempt_at,
        table.c.id,
        postgresql_where=channel_ready,
        sqlite_where=channel_ready,
    )
    sa.Index(
        f"ix_{name}_stuck",
        table.c.queue,
        table.c.acquired_at,
        postgresql_where=processing,
        sqlite_where=processing,
    )
    _key_indexes(table, name, partial=True)
    return table


def _key_indexes(table: sa.Table, name: str, *, partial: bool) -> None:
    """The ordering-key index (a claim's check for an earlier message of the key) and
    the idempotency-key unique index, named after the message table `name`. Most
    messages have neither key: where partial indexes exist they leave those rows out."""
    for column, index, unique, extra in (
        (table.c.ordering_key, f"ix_{name}_ordering", False, (table.c.id,)),
        (table.c.idempotency_key, f"ux_{name}_idempotency", True, ()),
    ):
        where: dict[str, Any] = {}
        if partial:
            keyed = column.isnot(None)
            where = {"postgresql_where": keyed, "sqlite_where": keyed}
        sa.Index(index, table.c.queue, column, *extra, unique=unique, **where)


def keys_table_name(message: str) -> str:
    return f"{message}_keys"


def has_key_row(ordering_key: str | None, idempotency_key: str | None, channel: str | None) -> bool:
    """Whether a message with these values has a row in the keys table where there is
    one (MySQL): a message with any of them is "keyed"."""
    return ordering_key is not None or idempotency_key is not None or channel is not None


def build_keys_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """MySQL and MariaDB: the ordering and idempotency keys of the messages that have
    one, under the key indexes. Those databases have no partial indexes, so on the
    message table the two indexes would hold an entry for every message, and keep it
    up on every publish and archive. A publish writes a row here for each keyed
    message, in its own transaction; the outcome that archives the message deletes
    the row in the same statement as the message. Index names are per table there, so
    the two keep the names they have on the message table elsewhere."""
    table = sa.Table(
        keys_table_name(message),
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=False),  # the message's id
        sa.Column("queue", MESSAGE_COLUMN["queue"].type, nullable=False),
        sa.Column("ordering_key", MESSAGE_COLUMN["ordering_key"].type),
        sa.Column("idempotency_key", MESSAGE_COLUMN["idempotency_key"].type),
        # revision 0014: the channel claim's way to a channel's messages (the message
        # table's ready index leaves them at CHANNEL_READY, in no useful order)
        sa.Column("channel", MESSAGE_COLUMN["channel"].type),
    )
    _key_indexes(table, message, partial=False)
    sa.Index(f"ix_{message}_channel", table.c.queue, table.c.channel, table.c.id)
    return table


def controls_table_name(message: str) -> str:
    return f"{message}_controls"


#: the `channel` of a control row that applies to its whole queue
WHOLE_QUEUE = ""


class BreakerState(str, enum.Enum):
    """Where a circuit breaker is (faststream_sqla.subscriber.breaker). Stored by name;
    a control row whose breaker never tripped holds NULL, which reads as CLOSED."""

    CLOSED = "CLOSED"
    """Claims as usual; consecutive failures are counted."""
    OPEN = "OPEN"
    """No claims until `breaker_reopens_at`."""
    HALF_OPEN = "HALF_OPEN"
    """One process (`breaker_probe`) claims one message, the probe, whose outcome
    closes or opens the breaker."""


#: the longest text of a breaker state, and of the id of a process holding a probe
BREAKER_STATE_LENGTH, BREAKER_PROBE_LENGTH = 16, 64
#: the longest text of a rate window's counts (channels.rate: SLOTS + 1 numbers)
RATE_COUNTS_LENGTH = 200


def build_controls_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """What operators set per queue and per channel, read by every consumer of the
    queue: whether its claims are paused, its circuit breaker's state, its limits and
    the channel claim's running state (rate windows, the rotation). One row per
    (queue, channel); the channel `WHOLE_QUEUE` stands for the queue itself. A queue
    or channel without a row runs with no limits."""
    return sa.Table(
        controls_table_name(message),
        metadata,
        sa.Column("queue", MESSAGE_COLUMN["queue"].type, primary_key=True),
        sa.Column(
            "channel", sa.String(MAX_KEY_LENGTH), primary_key=True, server_default=sa.text("''")
        ),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("updated_at", Timestamp, nullable=False),
        # revision 0013: the circuit breaker (NULL state: CLOSED, never tripped)
        sa.Column("breaker_state", sa.String(BREAKER_STATE_LENGTH)),
        sa.Column("breaker_failures", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("breaker_changed_at", Timestamp),
        # when HALF_OPEN may start: the database's time at opening plus the opener's
        # cooldown, so every process agrees
        sa.Column("breaker_reopens_at", Timestamp),
        sa.Column("breaker_probe", sa.String(BREAKER_PROBE_LENGTH)),
        # revision 0014: limits (faststream_sqla.channels). A row's own limits apply to
        # its channel, or on the queue's row to the whole queue; NULL: none.
        sa.Column("max_concurrency", sa.Integer()),
        sa.Column("rate_count", sa.Integer()),
        sa.Column("rate_period", sa.Float()),
        # the queue's row only: each channel's limits unless its own row sets them
        sa.Column("channel_max_concurrency", sa.Integer()),
        sa.Column("channel_rate_count", sa.Integer()),
        sa.Column("channel_rate_period", sa.Float()),
        # the rate's sliding window: the current slot's number and the recent counts
        # (channels.rate)
        sa.Column("rate_slot", sa.BigInteger()),
        sa.Column("rate_counts", sa.String(RATE_COUNTS_LENGTH)),
        # the queue's row only: the channel the claims served last (the rotation), and
        # a number every channel claim and every change of limits counts up: a claim
        # applies only if it is still what the claim read (channels.claim)
        sa.Column("rotation", sa.String(MAX_KEY_LENGTH)),
        sa.Column("version", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )


def schedule_table_name(message: str) -> str:
    return f"{message}_schedule"


#: schedule names are text of at most this many characters (room left under the key
#: length, should a fired message's key ever be built from the name and the tick)
MAX_SCHEDULE_NAME_LENGTH = 200
MAX_CRON_LENGTH = 255
MAX_TIMEZONE_LENGTH = 64


def build_schedule_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """One row per interval or cron schedule (faststream_sqla.schedules), named after
    the message table like the keys table. The timing and the message come from the
    declaration in code (upserted at broker start); `paused` is changed only through
    the admin API, so it survives restarts. Schedules are few and found by name: the
    primary key is the only index."""
    return sa.Table(
        schedule_table_name(message),
        metadata,
        sa.Column("name", sa.String(MAX_SCHEDULE_NAME_LENGTH), primary_key=True),
        sa.Column("queue", MESSAGE_COLUMN["queue"].type, nullable=False),
        sa.Column("payload", Payload, nullable=False),
        sa.Column("headers", Headers),
        # the other publish options (priority, correlation id, ...) by name: a new
        # option needs no migration here
        sa.Column("options", sa.JSON()),
        sa.Column("kind", sa.String(8), nullable=False),  # interval | cron
        sa.Column("every_seconds", sa.Double()),
        sa.Column("cron", sa.String(MAX_CRON_LENGTH)),
        sa.Column("timezone", sa.String(MAX_TIMEZONE_LENGTH)),
        sa.Column("missed", sa.String(16), nullable=False),  # skip | catch_up
        sa.Column("catch_up_limit", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("next_fire_at", Timestamp, nullable=False),
        sa.Column("last_fired_at", Timestamp),
        sa.Column("fired_count", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
    )


def breaker_events_table_name(message: str) -> str:
    return f"{message}_breaker_events"


def build_breaker_events_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """The history of every breaker: one row per change of state, with its reason."""
    table = sa.Table(
        breaker_events_table_name(message),
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("queue", MESSAGE_COLUMN["queue"].type, nullable=False),
        sa.Column(
            "channel", sa.String(MAX_KEY_LENGTH), nullable=False, server_default=sa.text("''")
        ),
        sa.Column("from_state", sa.String(BREAKER_STATE_LENGTH), nullable=False),
        sa.Column("to_state", sa.String(BREAKER_STATE_LENGTH), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("at", Timestamp, nullable=False),
    )
    # a short name: the message table's name may take 48 of PostgreSQL's 63 characters
    sa.Index(f"ix_{message}_breaker_ev", table.c.queue, table.c.id)
    return table


def workers_table_name(message: str) -> str:
    return f"{message}_workers"


#: a worker id is a uuid4's 32 hex digits; host names and package versions are cut to
#: these lengths
WORKER_ID_LENGTH, MAX_HOST_LENGTH, MAX_VERSION_LENGTH = 32, 255, 64


def build_workers_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """One row per started broker process (faststream_sqla.worker_registry): who it is,
    what it consumes, and what it held when it last wrote. A process inserts its row at
    start, rewrites it as often as it renews leases, and deletes it at a graceful stop;
    a row silent for longer than its `silent_after` is a worker that is gone. Few rows,
    found by id: the primary key is the only index."""
    return sa.Table(
        workers_table_name(message),
        metadata,
        sa.Column("worker_id", sa.String(WORKER_ID_LENGTH), primary_key=True),
        sa.Column("host", sa.String(MAX_HOST_LENGTH), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        # the queue names its subscribers consume, a JSON list
        sa.Column("queues", sa.JSON(), nullable=False),
        sa.Column("version", sa.String(MAX_VERSION_LENGTH), nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("last_seen", Timestamp, nullable=False),
        # the seconds of silence after which the process counts as gone: three of its
        # refresh intervals
        sa.Column("silent_after", sa.Float(), nullable=False),
        sa.Column("in_flight", sa.Integer(), nullable=False, server_default=sa.text("0")),
        # the ids of the messages it held at last_seen (claimed, not yet settled), a
        # JSON list: who holds a PROCESSING message is read from here, so that claims
        # write nothing more
        sa.Column("holding", sa.JSON(), nullable=False),
    )


def bindings_table_name(message: str) -> str:
    return f"{message}_bindings"


def build_bindings_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """Which queues a topic reaches: one row per (pattern, queue), named after the
    message table like the keys table. A publish to a topic reads the rows whose
    `root` (the pattern's first word, or "" where that is a wildcard) is the topic's
    first word or "", and matches their patterns (faststream_sqla.topics)."""
    table = sa.Table(
        bindings_table_name(message),
        metadata,
        sa.Column("pattern", sa.String(MAX_TOPIC_LENGTH), primary_key=True),
        sa.Column("queue", MESSAGE_COLUMN["queue"].type, primary_key=True),
        sa.Column("root", sa.String(MAX_TOPIC_LENGTH), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
    )
    sa.Index(f"ix_{message}_binding", table.c.root)
    return table


def endpoints_table_name(message: str) -> str:
    return f"{message}_endpoints"


def endpoint_topics_table_name(message: str) -> str:
    return f"{message}_endpoint_topics"


def attempts_table_name(message: str) -> str:
    return f"{message}_webhook_attempts"


#: the queue that holds every webhook delivery; each endpoint's deliveries are its
#: channel of that name, so its limits and breaker are the channel machinery's
DELIVERY_QUEUE = "faststream_sqla.webhooks"
#: the header of a delivery that names it to its receiver, the same on every attempt
WEBHOOK_ID_HEADER = "webhook-id"
#: the longest endpoint URL, and the longest text of a secret (`whsec_` + base64)
MAX_URL_LENGTH, MAX_SECRET_LENGTH = 2048, 255
#: how much of a response body an attempt keeps, in characters
KEPT_RESPONSE_LENGTH = 4096


def build_endpoints_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """One row per HTTP endpoint (faststream_sqla.webhooks), found by name: the
    name is also its channel of `DELIVERY_QUEUE`, where its limits and breaker live
    (the controls table). A secret being rotated out stays valid, and is signed with
    too, until `previous_secret_until`."""
    return sa.Table(
        endpoints_table_name(message),
        metadata,
        sa.Column("name", sa.String(MAX_KEY_LENGTH), primary_key=True),
        sa.Column("url", sa.String(MAX_URL_LENGTH), nullable=False),
        sa.Column("secret", sa.String(MAX_SECRET_LENGTH), nullable=False),
        sa.Column("previous_secret", sa.String(MAX_SECRET_LENGTH)),
        sa.Column("previous_secret_until", Timestamp),
        sa.Column("timeout", sa.Float(), nullable=False),
        # extra request headers, a JSON object of strings
        sa.Column("headers", sa.JSON()),
        sa.Column("allow_private", sa.Boolean(), nullable=False, server_default=sa.false()),
        # the seconds to wait before each retry, a JSON list (its length is the number
        # of retries); NULL: the default schedule (faststream_sqla.webhooks)
        sa.Column("retry_schedule", sa.JSON()),
        # set while disabled (by an operator, or by a 410 response): no new deliveries,
        # and its channel is paused so the pending ones wait
        sa.Column("disabled_at", Timestamp),
        sa.Column("disabled_reason", sa.Text()),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
    )


def build_endpoint_topics_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """Which endpoints a topic reaches: the bindings table's shape, with an endpoint
    in place of a queue. A publish to a topic reads both in one statement."""
    table = sa.Table(
        endpoint_topics_table_name(message),
        metadata,
        sa.Column("pattern", sa.String(MAX_TOPIC_LENGTH), primary_key=True),
        sa.Column("endpoint", sa.String(MAX_KEY_LENGTH), primary_key=True),
        sa.Column("root", sa.String(MAX_TOPIC_LENGTH), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
    )
    sa.Index(f"ix_{message}_endpoint_topic", table.c.root)
    return table


def build_attempts_table(metadata: sa.MetaData, message: str) -> sa.Table:
    """One row per HTTP request of a webhook delivery: its response status (NULL when
    none came: a timeout or a connection error, told by `error`), its latency and the
    start of the response body. Read per message (inspect) and per endpoint (the
    dashboard), newest first."""
    table = sa.Table(
        attempts_table_name(message),
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("message_id", sa.BigInteger(), nullable=False),
        sa.Column("endpoint", sa.String(MAX_KEY_LENGTH), nullable=False),
        # the delivery's deliveries_count when it was made
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", Timestamp, nullable=False),
        sa.Column("status", sa.Integer()),
        sa.Column("latency", sa.Float(), nullable=False),
        sa.Column("error", sa.Text()),
        sa.Column("response_body", sa.Text()),
    )
    sa.Index(f"ix_{message}_attempt_msg", table.c.message_id, table.c.id)
    sa.Index(f"ix_{message}_attempt_ep", table.c.endpoint, table.c.id)
    return table


def build_archive_table(metadata: sa.MetaData, name: str) -> sa.Table:
    table = sa.Table(
        name,
        metadata,
        sa.Column("id", Id, primary_key=True, autoincrement=False),
        *_columns(ARCHIVED_COLUMNS),
        sa.Column("archived_at", Timestamp, nullable=False),
        # REDRIVEN rows: the id of the message they were copied back to the queue as
        sa.Column("redriven_to", Id),
    )
    # The state second: a dead-letter page, a replay by state or a prune is one range
    # per queue and state, however many rows of other states surround it.
    sa.Index(f"ix_{name}_queue_state", table.c.queue, table.c.state, table.c.archived_at)
    return table


def validate_queue_name(name: object) -> str:
    """Queue names are stored as data; they must still fit the column and be readable."""
    from .exceptions import InvalidQueueNameError

    if not isinstance(name, str):
        msg = f"queue name must be a str, got {type(name).__name__}"
        raise InvalidQueueNameError(msg)
    if not name or not name.strip():
        msg = "queue name must not be empty"
        raise InvalidQueueNameError(msg)
    if len(name) > MAX_QUEUE_NAME_LENGTH:
        msg = f"queue name is {len(name)} characters long, the limit is {MAX_QUEUE_NAME_LENGTH}"
        raise InvalidQueueNameError(msg)
    if not name.isprintable():
        msg = f"queue name {shown(name)} contains control characters"
        raise InvalidQueueNameError(msg)
    return name


__all__ = [
    "CHANNEL_READY",
    "DELIVERY_QUEUE",
    "MYSQL_FAMILY",
    "NOT_READY",
    "BreakerState",
    "MessageState",
    "QueueTables",
    "TableNames",
    "attempts_table_name",
    "bindings_table_name",
    "breaker_events_table_name",
    "controls_table_name",
    "endpoint_topics_table_name",
    "endpoints_table_name",
    "keys_table_name",
    "schedule_table_name",
    "utc_now",
    "validate_queue_name",
    "workers_table_name",
]
