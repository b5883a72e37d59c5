"""Turns publish commands into rows: encode, validate, insert, wake consumers."""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from faststream._internal.endpoint.utils import ParserComposition
from faststream._internal.parser import DefaultCodec
from faststream._internal.producer import ProducerProto
from faststream.exceptions import FeatureNotSupportedException, IncorrectState
from faststream.message import encode_message, gen_cor_id
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from typing_extensions import override

from faststream_sqla import idempotency, ordering
from faststream_sqla.channels.groups import checked_message_channel
from faststream_sqla.clock import to_naive_utc
from faststream_sqla.drivers import topics as bindings
from faststream_sqla.drivers.base import NewMessage, reading, with_retries
from faststream_sqla.durations import integer, seconds_of
from faststream_sqla.exceptions import (
    DatabaseUnreachableError,
    InvalidOptionError,
    MessageSerializationError,
    QueueFullError,
    shown,
)
from faststream_sqla.message import TOPIC_HEADER, validate_delay
from faststream_sqla.options import NO_OPTIONS, DeliveryOptions, Envelope, checked_key
from faststream_sqla.parser import CONTENT_TYPE_HEADER, REPLY_TO_HEADER, SqlaParser
from faststream_sqla.response import SqlaPublishCommand
from faststream_sqla.schema import (
    MAX_CORRELATION_ID_LENGTH,
    MAX_PRIORITY,
    MIN_PRIORITY,
    WEBHOOK_ID_HEADER,
    validate_queue_name,
)
from faststream_sqla.topics import checked_topic, route_targets
from faststream_sqla.urls import masked

if TYPE_CHECKING:
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import CustomCallable, IdGenerator

    from faststream_sqla.drivers import Driver
    from faststream_sqla.health import DatabaseHealth
    from faststream_sqla.wakeup import WakeupHub


log = logging.getLogger(__name__)


class QueueLimits:
    """Backpressure: the most messages a queue may hold waiting or in flight, for every
    queue (`default`) and per queue name (`per_queue`, where None means no limit).

    The check is a bounded probe, not a count of the table, and is approximate under
    concurrent publishers: two that check at once may both insert.
    """

    def __init__(
        self, default: int | None = None, per_queue: Mapping[str, int | None] | None = None
    ) -> None:
        def checked(name: str, value: object) -> int | None:
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10**12:
                msg = f"{name} must be an integer from 1 to 10**12, or None; got {shown(value)}"
                raise InvalidOptionError(msg)
            return value

        self.default = checked("max_queue_size", default)
        if per_queue is not None and not isinstance(per_queue, Mapping):
            msg = f"max_queue_sizes must map queue names to sizes, got {shown(per_queue)}"
            raise InvalidOptionError(msg)
        self.per_queue = {
            validate_queue_name(queue): checked(f"max_queue_sizes[{shown(queue)}]", size)
            for queue, size in (per_queue or {}).items()
        }

    def of(self, queue: str) -> int | None:
        return self.per_queue.get(queue, self.default) if self.per_queue else self.default


def delay_seconds(delay: float | timedelta | str | None) -> float:
    if delay is None:
        return 0.0
    return validate_delay(seconds_of(delay, "delay"))


#: stored times end before this (MySQL keeps the last DATETIME for "not ready")
LATEST_TIME = datetime(9999, 1, 1)


def storable_time(value: datetime | None, what: str = "next_attempt_at") -> datetime | None:
    """An aware datetime as stored: naive UTC."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        msg = f"{what} must be a datetime, got {type(value).__name__}"
        raise InvalidOptionError(msg)
    if value.tzinfo is None or value.utcoffset() is None:
        msg = (
            f"{what} {value.isoformat()} is naive; pass an aware datetime, "
            "e.g. datetime.now(timezone.utc) + timedelta(minutes=5)"
        )
        raise InvalidOptionError(msg)
    try:
        stored = to_naive_utc(value)
    except OverflowError:
        stored = datetime.max
    if stored >= LATEST_TIME:
        msg = f"{what} {value.isoformat()} is too far ahead: the latest is {LATEST_TIME:%Y-%m-%d}"
        raise InvalidOptionError(msg)
    return stored


def timing(options: DeliveryOptions) -> tuple[datetime | None, float, datetime | None]:
    """When a message may first be delivered (a time, naive UTC, else a delay), and when
    it expires (naive UTC, or None)."""
    publish_at = storable_time(options.next_attempt_at)
    if publish_at is not None and options.delay is not None:
        msg = "pass either next_attempt_at or delay, not both"
        raise InvalidOptionError(msg)
    expires_at = storable_time(options.expires_at, "expires_at")
    if options.ttl is not None:
        if expires_at is not None:
            msg = "pass either expires_at or ttl, not both"
            raise InvalidOptionError(msg)
        seconds = validate_delay(seconds_of(options.ttl, "ttl"), "ttl")
        expires_at = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(seconds=seconds)
    return publish_at, delay_seconds(options.delay), expires_at


def checked_priority(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, str) and (number := integer(value)) is not None:
        value = number  # as FastStream's CLI passes it: `--priority 5`
    if isinstance(value, bool) or not isinstance(value, int):
        msg = (
            f"priority must be an integer from {MIN_PRIORITY} to {MAX_PRIORITY}, got {shown(value)}"
        )
        raise InvalidOptionError(msg)
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        msg = (
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY} (higher first), got "
            f"{shown(value)}"
        )
        raise InvalidOptionError(msg)
    return value


def row_options(options: DeliveryOptions) -> tuple[Any, ...]:
    """A message's validated options, in `NewMessage` order from publish_at on."""
    if options is NO_OPTIONS:  # most publishes: nothing given, nothing to check
        return _NO_ROW_OPTIONS
    return _checked_row_options(options)


def _checked_row_options(options: DeliveryOptions) -> tuple[Any, ...]:
    return (
        *timing(options),
        checked_priority(options.priority),
        checked_key(options.ordering_key, "ordering_key"),
        checked_key(options.idempotency_key, "idempotency_key"),
        checked_message_channel(checked_key(options.channel, "channel")),
    )


#: the options of a message given none, checked once
_NO_ROW_OPTIONS = _checked_row_options(NO_OPTIONS)


def checked_correlation_id(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    if len(text) > MAX_CORRELATION_ID_LENGTH:
        msg = f"correlation_id is longer than {MAX_CORRELATION_ID_LENGTH} characters"
        raise InvalidOptionError(msg)
    if "\x00" in text:  # PostgreSQL cannot store it; the others would
        msg = "correlation_id must not contain NUL characters"
        raise InvalidOptionError(msg)
    return text


def checked_headers(headers: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of `headers`, once they are known to be stored and read back as given:
    string names, JSON values (no NaN or Infinity, which no database's JSON holds), and
    a valid queue in a reply-to header."""
    if headers is None or (headers.__class__ is dict and not headers):
        return {}  # FastStream passes {} for no headers: nothing to check or encode
    if not isinstance(headers, Mapping):
        msg = f"headers must be a dict of header names to values, got {type(headers).__name__}"
        raise InvalidOptionError(msg)
    for name in headers:
        if not isinstance(name, str):
            msg = f"header names must be strings (JSON keys are), got {shown(name)}"
            raise InvalidOptionError(msg)
    copy = dict(headers)
    try:
        json.dumps(copy, allow_nan=False)
    except (TypeError, ValueError) as e:
        msg = f"headers must be JSON-serialisable, without NaN or Infinity: {e}"
        raise MessageSerializationError(msg) from e
    if REPLY_TO_HEADER in copy:
        validate_queue_name(copy[REPLY_TO_HEADER])
    return copy


def nonempty(items: tuple[Any, ...]) -> tuple[Any, ...]:
    """The messages of a publish; InvalidOptionError when a publish middleware left none
    (`cmd.batch_bodies = ()`, which FastStream's contract allows on the command)."""
    if not items:
        msg = (
            "a publish middleware set batch_bodies to nothing (batch_bodies = ()); "
            "a publish needs at least one message"
        )
        raise InvalidOptionError(msg)
    return items


class SqlaProducer(ProducerProto[SqlaPublishCommand]):
    """Inserts messages through the broker's driver."""

    def __init__(
        self,
        *,
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
    ) -> None:
        default = SqlaParser()
        self._parser = ParserComposition(parser, default.parse_message)
        self._decoder = ParserComposition(decoder, default.decode_message)
        self.codec: CodecProto = DefaultCodec()
        self.serializer: SerializerProto | None = None
        self.limits = QueueLimits()
        #: commit the broker's own publishes without waiting for the WAL flush, where
        #: the database can (PostgreSQL): see SqlaBroker(fast_publish=...)
        self.fast_publish = False
        #: correlation ids of messages published without one (SqlaBroker(id_generator=...))
        self.id_generator: IdGenerator = gen_cor_id
        self._engine: AsyncEngine | None = None
        self._driver: Driver | None = None
        self._wakeups: WakeupHub | None = None
        self._health: DatabaseHealth | None = None

    def connect(
        self,
        engine: AsyncEngine,
        driver: Driver,
        wakeups: WakeupHub,
        serializer: SerializerProto | None,
        codec: CodecProto | None,
        health: DatabaseHealth,
    ) -> None:
        self._engine, self._driver, self._wakeups = engine, driver, wakeups
        self._health = health
        self.serializer = serializer
        self.codec = codec or DefaultCodec()

    def disconnect(self) -> None:
        self._engine = self._driver = None

    def __bool__(self) -> bool:
        return True

    @override
    async def publish(self, cmd: SqlaPublishCommand) -> int | list[int]:
        ids = await self._insert(cmd, bodies=nonempty(cmd.batch_items[:1]))
        # to a topic: one copy per bound queue, maybe none
        return ids if cmd.topic is not None else ids[0]

    @override
    async def publish_batch(self, cmd: SqlaPublishCommand) -> list[int]:
        return await self._insert(cmd, bodies=nonempty(cmd.batch_items))

    @override
    async def request(self, cmd: SqlaPublishCommand) -> Any:
        msg = (
            "request/reply is not supported by database queues: publish with reply_to "
            "and consume the reply queue instead"
        )
        raise FeatureNotSupportedException(msg)

    async def build_rows(
        self, cmd: SqlaPublishCommand, bodies: tuple[Any, ...]
    ) -> list[NewMessage]:
        """Validate everything before anything is written. The rows of a publish to a
        topic have no queue yet: `fan_out` copies them into the bound queues."""
        if cmd.topic is not None:
            if cmd.destination:
                msg = (
                    f"pass either a queue ({shown(cmd.destination)}) or a topic "
                    f"({shown(cmd.topic)}), not both"
                )
                raise InvalidOptionError(msg)
            queue = ""
            checked_topic(cmd.topic)
        else:
            queue = validate_queue_name(cmd.destination)
        call_options = row_options(cmd.options)  # NewMessage's fields from publish_at on
        if cmd.options.idempotency_key is not None and len(bodies) > 1:
            msg = (
                "idempotency_key names one message: give each message of a batch its "
                "own, as Envelope(body, idempotency_key=...)"
            )
            raise InvalidOptionError(msg)
        correlation_id = checked_correlation_id(cmd.correlation_id)
        headers = checked_headers(cmd.headers)
        if cmd.reply_to:
            headers[REPLY_TO_HEADER] = validate_queue_name(cmd.reply_to)
        if cmd.topic is not None:
            # how a handler reads it (SqlaMessage.topic): claims return no topic column
            headers[TOPIC_HEADER] = cmd.topic

        # Each message of a batch gets its own correlation id unless the caller gave one:
        # one random base per call, numbered, is unique and costs no uuid4 per message.
        base_id = None if correlation_id is not None else self.id_generator()
        # Rows of one content type share one headers dict and its JSON text.
        by_content_type: dict[str | None, tuple[dict[str, Any], str]] = {}
        shared: tuple[dict[str, Any], str] | None
        rows = []
        codec, serializer = self.codec, self.serializer
        # FastStream's default codec only wraps encode_message in a coroutine: calling it
        # directly saves a coroutine per body (a tenth of publish_batch's own time).
        plain = type(codec) is DefaultCodec
        for index, body in enumerate(bodies):
            item_headers: dict[str, Any] | None = None
            item_id = correlation_id
            item_options = call_options
            if body.__class__ is Envelope:  # options of its own
                if body.headers is not None:
                    item_headers = {**headers, **checked_headers(body.headers)}
                if body.correlation_id is not None:
                    item_id = checked_correlation_id(body.correlation_id)
                if body.options is not NO_OPTIONS:
                    item_options = row_options(body.options.over(cmd.options))
                body = body.body
            try:
                payload, content_type = (
                    encode_message(body, serializer)
                    if plain
                    else await codec.encode(body, serializer)
                )
            except Exception as e:
                msg = f"cannot serialise a message body of type {type(body).__name__}: {e}"
                raise MessageSerializationError(msg) from e
            if item_headers is not None:
                if content_type:  # a content type the caller gave is kept
                    item_headers.setdefault(CONTENT_TYPE_HEADER, content_type)
                shared = (item_headers, json.dumps(item_headers))
            elif (shared := by_content_type.get(content_type)) is None:
                # a content type the caller gave is kept (their decoder may rely on it)
                row_headers = (
                    {CONTENT_TYPE_HEADER: content_type, **headers} if content_type else headers
                )
                shared = by_content_type[content_type] = (row_headers, json.dumps(row_headers))
            rows.append(
                NewMessage(  # positional: this runs per message
                    queue,
                    shared[0],
                    shared[1],
                    payload,
                    item_id
                    if item_id is not None
                    else base_id
                    if len(bodies) == 1
                    else f"{base_id}-{index}",
                    *item_options,
                )
            )
        return rows

    async def _check_room(self, conn: AsyncConnection, queue: str, count: int) -> None:
        """QueueFullError unless `count` more messages fit under `queue`'s limit."""
        assert self._driver is not None
        limit = self.limits.of(queue)
        if limit is None:
            return
        held = await self._driver.count_active(conn, queue, at_most=limit)
        if held + count > limit:
            msg = (
                f"queue {shown(queue)} is full: it holds {'at least ' if held >= limit else ''}"
                f"{held} waiting or in-flight messages, its max_queue_size is {limit}, "
                f"so {count} more do not fit; nothing was written"
            )
            raise QueueFullError(msg)

    async def _insert(self, cmd: SqlaPublishCommand, bodies: tuple[Any, ...]) -> list[int]:
        if self._engine is None or self._driver is None or self._wakeups is None:
            msg = "the broker is not connected: call `await broker.connect()` or start the app"
            raise IncorrectState(msg)
        rows = await self.build_rows(cmd, bodies)
        if not rows:
            return []
        try:
            if cmd.topic is not None:
                return await self._store_to_topic(cmd, cmd.topic, rows)
            return await self._store(cmd, rows)
        except Exception as e:
            if not self._driver.is_unreachable(e):
                raise
            assert self._health is not None
            self._health.noticed(e)  # logged once per outage, with its end
            # one error to catch, whichever driver failed and however
            target = (
                f"topic {shown(cmd.topic)}"
                if cmd.topic is not None
                else f"queue {shown(rows[0].queue)}"
            )
            msg = (
                f"cannot reach the database at {masked(self._engine.url)} to publish to "
                f"{target}: {type(e).__name__}: {e}. Nothing was stored, "
                "unless the connection was lost while the commit was under way"
            )
            raise DatabaseUnreachableError(msg) from e

    async def _store(self, cmd: SqlaPublishCommand, rows: list[NewMessage]) -> list[int]:
        assert self._engine is not None and self._driver is not None
        assert self._wakeups is not None
        driver, wakeups, queues = self._driver, self._wakeups, {rows[0].queue}
        limit = self.limits.of(rows[0].queue)
        keyed = idempotency.has_keys(rows)
        # ids of new messages set WAITING behind an earlier one of their ordering key
        waiting: list[int] = []

        async def hold(
            conn: AsyncConnection, inserted: Sequence[NewMessage], ids: list[int]
        ) -> None:
            waiting.extend(await ordering.hold_behind_keys(driver, conn, inserted, ids))

        hold_keys = hold if ordering.has_ordering_keys(rows) else None
        release_waiting = self._releaser(waiting)

        if cmd.connection is None:

            async def insert_and_commit() -> list[int]:
                assert self._engine is not None
                waiting.clear()
                if limit is not None:
                    async with reading(self._engine) as conn:
                        await self._check_room(conn, rows[0].queue, len(rows))
                if keyed:
                    return await idempotency.insert_in_own_transaction(
                        driver,
                        self._engine,
                        rows,
                        relaxed=self.fast_publish,
                        after_insert=hold_keys,
                    )
                if hold_keys is not None:
                    async with driver.own_transaction(self._engine) as conn:
                        ids = await driver.insert_messages(conn, rows)
                        await hold_keys(conn, rows, ids)
                        return ids
                return await driver.insert_committed(self._engine, rows, relaxed=self.fast_publish)

            ids = await with_retries(driver, insert_and_commit)
            if waiting:
                await release_waiting()
            wakeups.wake(queues)
            return ids

        # Transactional outbox: the rows join the caller's transaction and exist only
        # if it commits; local consumers are woken at that commit, not before.
        conn = await self._callers_connection(cmd)
        ids = await self._write(conn, rows, {rows[0].queue: len(rows)}, waiting)
        self._wake_at_commit(conn, queues, release_waiting if waiting else None)
        return ids

    async def _store_to_topic(
        self, cmd: SqlaPublishCommand, topic: str, rows: list[NewMessage]
    ) -> list[int]:
        """A copy of `rows` in each queue bound to `topic`, in one transaction (the
        caller's, or one of our own): the bindings are read in it, so a binding
        committed before the publish began is always honoured."""
        assert self._engine is not None and self._driver is not None
        assert self._wakeups is not None
        driver, engine, wakeups = self._driver, self._engine, self._wakeups
        queues: list[str] = []
        waiting: list[int] = []

        async def write(conn: AsyncConnection) -> list[int]:
            candidates = await bindings.candidate_targets(
                conn, driver.tables, topic, driver.latest_rows
            )
            targets = route_targets(candidates, topic)
            queues[:] = sorted({queue for queue, _ in targets})
            if not targets:
                return []
            counts: dict[str, int] = {}
            for queue, _ in targets:
                counts[queue] = counts.get(queue, 0) + len(rows)
            return await self._write(conn, fan_out(rows, targets, topic), counts, waiting)

        release_waiting = self._releaser(waiting)

        if cmd.connection is None:

            async def in_own_transaction() -> list[int]:
                waiting.clear()
                async with driver.own_transaction(engine) as conn:
                    return await write(conn)

            ids = await with_retries(driver, in_own_transaction)
            if waiting:
                await release_waiting()
            if queues:
                wakeups.wake(queues)
            return ids
        conn = await self._callers_connection(cmd)
        ids = await write(conn)
        if queues:
            self._wake_at_commit(conn, set(queues), release_waiting if waiting else None)
        return ids

    def _releaser(self, waiting: list[int]) -> Callable[[], Awaitable[None]]:
        """What releases the messages of `waiting` that are first of their ordering
        key, after the publish committed: whichever of this and the archive before it
        starts last releases the key's next message (see faststream_sqla.ordering)."""
        driver, engine = self._driver, self._engine
        assert driver is not None and engine is not None

        async def release_waiting() -> None:
            try:
                await with_retries(driver, lambda: ordering.release_first(driver, engine, waiting))
            except Exception:
                log.warning(
                    "could not release messages waiting for their ordering key", exc_info=True
                )

        return release_waiting

    async def _write(
        self,
        conn: AsyncConnection,
        rows: Sequence[NewMessage],
        counts: Mapping[str, int],
        waiting: list[int],
    ) -> list[int]:
        """In a transaction the caller of this method owns: refuse the whole publish if
        any queue would pass its limit (`counts`: new messages per queue), insert the
        rows, hold those behind an earlier message of their ordering key (their ids
        are added to `waiting`)."""
        driver = self._driver
        assert driver is not None
        for queue, count in counts.items():
            # a read: refusing leaves the caller's transaction usable
            await self._check_room(conn, queue, count)

        async def hold(
            conn: AsyncConnection, inserted: Sequence[NewMessage], ids: list[int]
        ) -> None:
            waiting.extend(await ordering.hold_behind_keys(driver, conn, inserted, ids))

        hold_keys = hold if ordering.has_ordering_keys(rows) else None
        if idempotency.has_keys(rows):
            return await idempotency.insert_in_transaction(
                driver, conn, rows, after_insert=hold_keys
            )
        ids = await driver.insert_messages(conn, rows)
        if hold_keys is not None:
            await hold_keys(conn, rows, ids)
        return ids

    async def _callers_connection(self, cmd: SqlaPublishCommand) -> AsyncConnection:
        conn = cmd.connection
        if isinstance(conn, AsyncSession):
            conn = await conn.connection()
        if not isinstance(conn, AsyncConnection):
            msg = (
                f"connection must be an AsyncConnection or AsyncSession, got {type(conn).__name__}"
            )
            raise InvalidOptionError(msg)
        return conn

    def _wake_at_commit(
        self,
        conn: AsyncConnection,
        queues: Collection[str],
        then: Callable[[], Awaitable[None]] | None,
    ) -> None:
        """Wake this process's consumers of `queues` when the caller's transaction
        commits (never for a rollback), then run `then`."""
        wakeups = self._wakeups
        assert wakeups is not None
        event.listen(
            conn.sync_connection,
            "commit",
            lambda sync_conn: wakeups.wake_after_commit(sync_conn, queues, then),
            once=True,
        )


def fan_out(
    rows: Sequence[NewMessage], targets: Sequence[tuple[str, str | None]], topic: str
) -> list[NewMessage]:
    """A copy of every row for each (queue, channel) target, target by target: the
    order of the ids a publish to a topic returns. A target with a channel is an
    endpoint's: the copy takes that channel, and a `webhook-id` header made here, kept
    by every retry, replay and redrive (the receiver's idempotency key). Positional:
    this runs per copy."""
    copies = []
    for queue, endpoint in targets:
        for r in rows:
            headers, headers_json, channel = r.headers, r.headers_json, r.channel
            ordering_key, idempotency_key = r.ordering_key, r.idempotency_key
            if endpoint is not None:
                headers = {**r.headers, WEBHOOK_ID_HEADER: f"msg_{uuid.uuid4().hex}"}
                headers_json, channel = json.dumps(headers), endpoint
                # the endpoints share one queue: a key holds per endpoint, as per queue
                ordering_key = _per_endpoint(ordering_key, endpoint)
                idempotency_key = _per_endpoint(idempotency_key, endpoint)
            copies.append(
                NewMessage(
                    queue,
                    headers,
                    headers_json,
                    r.payload,
                    r.correlation_id,
                    r.publish_at,
                    r.publish_delay,
                    r.expires_at,
                    r.priority,
                    ordering_key,
                    idempotency_key,
                    channel,
                    None,
                    topic,
                )
            )
    return copies


def _per_endpoint(key: str | None, endpoint: str) -> str | None:
    """A publisher's ordering or idempotency key as it holds for one endpoint's
    deliveries: the same key and endpoint always give the same text, of fixed length."""
    if key is None:
        return None
    return "ep:" + hashlib.sha256(f"{endpoint}\n{key}".encode()).hexdigest()
