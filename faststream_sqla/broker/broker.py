"""`SqlaBroker`: a FastStream broker whose queues are tables in your database."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast, overload

import sqlalchemy as sa
from fast_depends import Provider, dependency_provider
from faststream._internal.broker import BrokerUsecase
from faststream._internal.configs import UnderlyingDriverAnnotation, UnderlyingDriverAnnotations
from faststream._internal.constants import EMPTY
from faststream._internal.context.repository import ContextRepo
from faststream._internal.di import FastDependsConfig
from faststream.message import gen_cor_id
from faststream.middlewares import AckPolicy
from faststream.response.publish_type import PublishType
from faststream.specification.schema import BrokerSpec
from sqlalchemy.ext.asyncio import AsyncEngine
from typing_extensions import Unpack, override

from faststream_sqla.broker_config import SqlaBrokerConfig
from faststream_sqla.connecting import (
    create_engine,
    ensure_reachable,
    missing_sqlite_file,
    unreachable,
)
from faststream_sqla.drivers import driver_for, topics
from faststream_sqla.drivers.base import NotificationListener, WakeupHooks, reading, with_retries
from faststream_sqla.drivers.probe import select_one
from faststream_sqla.exceptions import InvalidOptionError, SchemaMissingError, shown
from faststream_sqla.message import ClaimedMessage, SqlaMessage
from faststream_sqla.migrations import check_schema, upgrade_command
from faststream_sqla.options import DeliveryOptionArgs, DeliveryOptions, Envelope
from faststream_sqla.producer import QueueLimits, SqlaProducer
from faststream_sqla.response import Connection, SqlaPublishCommand, check_batch_arguments
from faststream_sqla.schedules import ScheduleRunner
from faststream_sqla.schema import QueueTables, TableNames
from faststream_sqla.urls import masked, parse_url
from faststream_sqla.vacuum import MessageTableVacuum

from .logging import make_sqla_logger_state, one_line_handler_signals
from .registrator import SqlaRegistrator

if TYPE_CHECKING:
    from types import TracebackType

    from fast_depends.dependencies import Dependant
    from fast_depends.library.serializer import SerializerProto
    from faststream._internal.basic_types import LoggerProto, SendableMessage
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable, IdGenerator
    from faststream.security import BaseSecurity
    from faststream.specification.schema.extra import Tag, TagDict

    from faststream_sqla.subscriber.usecase import SqlaSubscriber

DEFAULT_URL = "sqlite+aiosqlite:///faststream_sqla.db"
#: the longest graceful_timeout: a week, as for a subscriber's handler_timeout
MAX_GRACEFUL_TIMEOUT = 7 * 86400.0


def _check_broker_options(
    graceful_timeout: object, engine_options: object, log_level: object
) -> None:
    # Checked at construction, so a value that cannot work fails here and not at stop.
    if graceful_timeout is not None and (
        isinstance(graceful_timeout, bool)
        or not isinstance(graceful_timeout, (int, float))
        or not 0 <= graceful_timeout <= MAX_GRACEFUL_TIMEOUT
    ):
        msg = (
            "graceful_timeout must be None or a number of seconds from 0 to "
            f"{MAX_GRACEFUL_TIMEOUT:g}, got {shown(graceful_timeout)}"
        )
        raise InvalidOptionError(msg)
    if engine_options is not None and not isinstance(engine_options, Mapping):
        msg = (
            "engine_options must be a dict of create_async_engine() arguments, "
            f"got {shown(engine_options)}"
        )
        raise InvalidOptionError(msg)
    if isinstance(log_level, bool) or not isinstance(log_level, int):
        msg = (
            "log_level must be a logging level (an int such as logging.INFO), got "
            f"{shown(log_level)}"
        )
        raise InvalidOptionError(msg)


def driver_annotations() -> UnderlyingDriverAnnotations:
    """The types FastStream lets a handler ask for by annotation alone (SqlaMessage,
    SqlaBroker, Engine), each named as `faststream_sqla.annotations` defines it."""
    # Imported late: the annotations module imports this one.
    from faststream_sqla import annotations

    def row(name: str) -> UnderlyingDriverAnnotation:
        return UnderlyingDriverAnnotation(
            type_hint=getattr(annotations, name), module="faststream_sqla.annotations", name=name
        )

    return MappingProxyType(
        {SqlaMessage: row("SqlaMessage"), SqlaBroker: row("SqlaBroker"), AsyncEngine: row("Engine")}
    )


class SqlaBroker(SqlaRegistrator, BrokerUsecase[ClaimedMessage, AsyncEngine, SqlaBrokerConfig]):
    """Durable queues in PostgreSQL, MySQL/MariaDB or SQLite.

    Every option is checked here (`InvalidOptionError` names the option and its
    bounds); docs/configuration.md gives each one's default, bounds and effect.

    Args:
        url_or_engine: a SQLAlchemy async URL (the broker creates, owns and disposes
            that engine) or an `AsyncEngine` you own, e.g. your application's.
        message_table: the table of live messages (1-48 letters, digits or `_`).
        archive_table: the table of finished messages (same rules, another name).
        validate_schema: check at connect that the tables exist at the revision this
            release needs (`SchemaMissingError`, `SchemaOutdatedError`).
        vacuum_message_table: PostgreSQL: vacuum the message table in the background
            as messages are settled.
        max_queue_size: backpressure: a publish past this many waiting and in-flight
            messages of a queue raises `QueueFullError` (1 to 10**12; None: no limit).
        max_queue_sizes: per-queue limits overriding `max_queue_size`.
        fast_publish: PostgreSQL: the broker's own commits of publishes do not wait
            for their WAL flush.
        cross_process_wakeups: wake subscribers at once for messages other processes
            publish (PostgreSQL: LISTEN; MariaDB and SQLite: a watcher of new message
            ids); False leaves them to find those at their next poll.
        engine_options: keyword arguments of `create_async_engine()` for an engine
            the broker creates.
        graceful_timeout: seconds running handlers get to finish at stop (None: no
            limit); then they are cancelled and their messages go back to the queue.
        decoder: a custom decoder for every subscriber.
        parser: a custom parser for every subscriber.
        codec: how message bodies are encoded to bytes and decoded.
        dependencies: FastDepends dependencies of every handler.
        middlewares: broker middlewares.
        routers: `SqlaRouter`s to include.
        ack_policy: the default ack policy of every subscriber
            (`AckPolicy.NACK_ON_ERROR` when not set).
        specification_url: the server URL in the AsyncAPI document (default: the
            URL, password masked).
        protocol: the server protocol in the document (default: the URL's backend).
        protocol_version: the server protocol version in the document.
        description: the server description in the document.
        tags: the server tags in the document.
        security: the security scheme shown in the document.
        logger: the logger of the broker's lines (None: no logging).
        log_level: the level of the per-message access lines.
        apply_types: let FastDepends validate and cast handler arguments.
        serializer: the FastDepends serializer.
        provider: the dependency provider (default: FastDepends' global one).
        context: the FastStream context repository (default: a new one).
    """

    def __init__(
        self,
        url_or_engine: str | sa.URL | AsyncEngine = DEFAULT_URL,
        *,
        message_table: str = "message",
        archive_table: str = "message_archive",
        validate_schema: bool = True,
        vacuum_message_table: bool = True,
        max_queue_size: int | None = None,
        max_queue_sizes: Mapping[str, int | None] | None = None,
        fast_publish: bool = False,
        cross_process_wakeups: bool = True,
        engine_options: dict[str, Any] | None = None,
        graceful_timeout: float | None = 15.0,
        decoder: CustomCallable | None = None,
        parser: CustomCallable | None = None,
        codec: CodecProto | None = None,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        routers: Iterable[SqlaRegistrator] = (),
        ack_policy: AckPolicy = EMPTY,
        id_generator: IdGenerator = gen_cor_id,
        # AsyncAPI
        specification_url: str | None = None,
        protocol: str | None = None,
        protocol_version: str | None = None,
        description: str | None = None,
        tags: Iterable[Tag | TagDict] = (),
        security: BaseSecurity | None = None,
        # logging
        logger: LoggerProto | None = EMPTY,
        log_level: int = logging.INFO,
        # FastDepends
        apply_types: bool = True,
        serializer: SerializerProto | None = EMPTY,
        provider: Provider | None = None,
        context: ContextRepo | None = None,
    ) -> None:
        if isinstance(url_or_engine, AsyncEngine):
            url: sa.URL = url_or_engine.url
        else:
            url = parse_url(url_or_engine)
        producer = SqlaProducer(parser=parser, decoder=decoder)
        # backpressure: checked now, so a bad limit fails at construction
        producer.limits = QueueLimits(max_queue_size, max_queue_sizes)
        for name, flag in (
            ("fast_publish", fast_publish),
            ("validate_schema", validate_schema),
            ("vacuum_message_table", vacuum_message_table),
            ("cross_process_wakeups", cross_process_wakeups),
        ):
            if not isinstance(flag, bool):
                msg = f"{name} must be True or False, got {shown(flag)}"
                raise InvalidOptionError(msg)
        _check_broker_options(graceful_timeout, engine_options, log_level)
        producer.fast_publish = fast_publish
        if not callable(id_generator):
            msg = f"id_generator must be a function returning a str, got {shown(id_generator)}"
            raise InvalidOptionError(msg)
        producer.id_generator = id_generator
        tables = QueueTables(
            TableNames(message=message_table, archive=archive_table),
            dialect=url.get_backend_name(),
        )
        one_line_handler_signals(logger)  # a RetryAfter is a line, not a traceback
        super().__init__(
            url_or_engine=url_or_engine,
            engine_options=dict(engine_options or {}),
            validate_schema=validate_schema,
            routers=routers,
            config=SqlaBrokerConfig(
                producer=producer,
                default_driver_annotations=driver_annotations(),
                tables=tables,
                vacuum=MessageTableVacuum(enabled=vacuum_message_table),
                broker_middlewares=middlewares,
                broker_parser=parser,
                broker_decoder=decoder,
                broker_codec=codec,
                logger=make_sqla_logger_state(logger=logger, log_level=log_level),
                fd_config=FastDependsConfig(
                    use_fastdepends=apply_types,
                    serializer=serializer,
                    provider=provider or dependency_provider,
                    context=context or ContextRepo(),
                ),
                broker_dependencies=dependencies,
                graceful_timeout=graceful_timeout,
                ack_policy=ack_policy,
                id_generator=id_generator,
                extra_context={"broker": self},
            ),
            specification=BrokerSpec(
                description=description,
                url=[specification_url or masked(url)],
                protocol=protocol or url.get_backend_name(),
                protocol_version=protocol_version,
                tags=tags,
                security=security,
            ),
        )
        self.url = url
        self.cross_process_wakeups = cross_process_wakeups
        #: the cross-process wake-up source while running (PostgreSQL's LISTEN, the
        #: MariaDB and SQLite watchers), else None
        self.notifications: NotificationListener | None = None
        #: what `at_stop` registered, run after the subscribers' final flushes
        self._stop_hooks: list[Callable[[], Awaitable[None]]] = []
        #: fires the declared schedules while running, None when there are none
        self.schedule_runner: ScheduleRunner | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The engine in use (connect first)."""
        return self.config.engine

    @property
    def tables(self) -> QueueTables:
        """The queue tables (SQLAlchemy `Table`s under the configured names)."""
        return self.config.tables

    @override
    async def _connect(self) -> AsyncEngine:
        target = self._connection_kwargs["url_or_engine"]
        owned = not isinstance(target, AsyncEngine)
        engine = (
            create_engine(target, **self._connection_kwargs["engine_options"]) if owned else target
        )
        try:
            driver = driver_for(engine, self.config.tables)
        except InvalidOptionError:
            if owned:
                await engine.dispose()
            raise
        missing = missing_sqlite_file(engine.url)
        if self._connection_kwargs["validate_schema"] and missing and missing.parent.is_dir():
            # connecting would create an empty file, only for the schema check to fail (in a
            # directory that does not exist, it fails to open: the unreachable error below)
            if owned:
                await engine.dispose()
            fix = upgrade_command(engine, self.config.tables.names)
            msg = f"no SQLite database at {missing} (the file does not exist); run: {fix}"
            raise SchemaMissingError(msg)
        driver.configure_engine(engine, owned=owned)
        try:
            await ensure_reachable(engine)
            try:
                await driver.prepare(engine)
            except Exception as e:
                raise unreachable(engine.url, e) from e
        except Exception:
            if owned:
                await engine.dispose()
            raise
        if self._connection_kwargs["validate_schema"]:
            try:
                await check_schema(engine, driver.tables)
            except Exception:
                if owned:
                    await engine.dispose()
                raise
        self._owns_engine = owned
        self.config.connect(engine, driver)
        return engine

    @override
    def _setup_logger(self) -> None:
        # FastStream sets the logger up once connected: the first moment we can warn
        # about settings that the database turned out not to support
        super()._setup_logger()
        if not self.config.broker_config.producer.fast_publish or self._connection is None:
            return
        driver = self.config.driver
        if not driver.relaxes_commits:
            self.config.logger.log(
                f"fast_publish has no effect on {driver.name}: every publish is committed "
                "durably (only PostgreSQL can relax one transaction's commit)",
                logging.WARNING,
                {"queue": "", "message_id": ""},
            )

    @override
    async def start(self) -> None:
        await self.connect()
        self.config.logger.log(
            f"Connected to {masked(self.url)}", logging.INFO, {"queue": "", "message_id": ""}
        )
        if (denied := self.config.vacuum.denied) is not None:
            self.config.logger.log(
                f"Not vacuuming the message table ({denied}); autovacuum alone keeps it",
                logging.INFO,
                {"queue": "", "message_id": ""},
            )
        await self._bind_topics()
        await super().start()
        # after the subscribers started: the row names the queues they consume
        await self.config.workers.start()
        await self._start_notifications()
        await self._start_schedules()

    async def _bind_topics(self) -> None:
        """Bind the subscribers' queues to their topics (`subscriber(topics=...)`);
        bindings already there stay as they are."""
        pairs = [
            pair for sub in cast("list[SqlaSubscriber]", self.subscribers) for pair in sub.bindings
        ]
        if not pairs or self.config.broker_config.in_memory:  # TestSqlaBroker: no tables
            return
        driver, engine = self.config.driver, self.engine

        async def bind() -> int:
            async with driver.own_transaction(engine) as conn:
                return await topics.bind(conn, driver.tables, pairs)

        await with_retries(driver, bind)

    async def _start_schedules(self) -> None:
        """Write and fire the declared schedules; nothing at all without any."""
        if not self.schedules or self.schedule_runner is not None:
            return
        config = self.config

        def log(level: int, message: str) -> None:
            config.logger.log(message, level, {"queue": "", "message_id": ""})

        runner = ScheduleRunner(self.schedules, self.publish, log)
        producer = config.broker_config.producer
        await runner.start(
            config.engine, config.driver, producer.codec, producer.serializer, config.health
        )
        self.schedule_runner = runner

    async def _start_notifications(self) -> None:
        """Hear publishes from other processes: the database's one wake-up source for
        this process (`Driver.listener`), unless `cross_process_wakeups` is off."""
        subscribers = cast("list[SqlaSubscriber]", self.subscribers)  # all made by us
        consumed = {q for sub in subscribers if sub.calls for q in sub.queues}
        if not consumed or self.notifications is not None or not self.cross_process_wakeups:
            return
        wakeups, health = self.config.wakeups, self.config.health

        def log(level: int, message: str) -> None:
            self.config.logger.log(message, level, {"queue": "", "message_id": ""})

        hooks = WakeupHooks(
            on_queue=lambda queue: wakeups.wake((queue,)),
            on_reconnect=lambda: wakeups.wake(consumed),
            log=log,
            noticed=health.noticed,
            consumes=wakeups.consumes,
            due_checks=wakeups.due_checks,
            covering=wakeups.set_covered,
        )
        listener = self.config.driver.listener(self.config.engine, hooks)
        if listener is not None:
            self.notifications = listener
            await listener.start()

    @override
    async def stop(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> None:
        if self.schedule_runner is not None:
            await self.schedule_runner.stop()
            self.schedule_runner = None
        self.config.vacuum.close()
        await super().stop(exc_type, exc_val, exc_tb)  # subscribers' final flushes too
        for hook in self._stop_hooks:
            await hook()
        await self.config.workers.stop()
        await self.config.vacuum.stop()
        await self.config.health.close()
        if self.notifications is not None:
            await self.notifications.stop()
            self.notifications = None
        if self._connection is not None:
            if getattr(self, "_owns_engine", False):
                await self._connection.dispose()
            self._connection = None
            self.config.disconnect()

    def at_stop(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run `hook` at every stop, once the subscribers have stopped and written
        their outcomes, while the database is still connected (what a component built
        on the broker's subscribers, such as webhook delivery, closes or writes last)."""
        self._stop_hooks.append(hook)

    @override
    async def ping(self, timeout: float | None = None) -> bool:
        if self._connection is None:
            return False
        engine = self._connection

        async def probe() -> None:
            async with reading(engine) as conn:
                await select_one(conn)

        try:
            await asyncio.wait_for(probe(), timeout or 5.0)
        except Exception:
            return False
        return True

    @overload
    async def publish(
        self,
        message: SendableMessage = None,
        queue: str = "",
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        connection: Connection | None = None,
        topic: None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> int: ...

    @overload
    async def publish(
        self,
        message: SendableMessage = None,
        queue: str = "",
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        connection: Connection | None = None,
        topic: str,
        **options: Unpack[DeliveryOptionArgs],
    ) -> list[int]: ...

    @override
    async def publish(
        self,
        message: SendableMessage = None,
        queue: str = "",
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        connection: Connection | None = None,
        topic: str | None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> int | list[int]:
        """Store one message in `queue`; returns its id. With `topic` instead of a
        queue, store a copy in every queue bound to the topic; returns their ids.

        Args:
            message: str, bytes, a dict/list (JSON) or a pydantic model.
            queue: the target queue.
            topic: dot-separated words (docs/topics.md): a copy goes to each queue
                bound to a pattern it matches, all in one transaction; returns one id
                per queue, in queue-name order (none when no queue is bound).
            headers: a JSON-serialisable dict stored with the message.
            correlation_id: at most 255 characters (default: a new id).
            reply_to: the queue the handler's return value is published to.
            connection: an `AsyncConnection` or `AsyncSession` whose transaction the
                insert joins (transactional outbox); without it the publish commits alone.
            **options: delivery options (`faststream_sqla.options.DeliveryOptionArgs`):
                `delay` or `next_attempt_at`, `ttl` or `expires_at`, `priority`,
                `ordering_key`, `idempotency_key` (docs/message-options.md).
        """
        cmd = SqlaPublishCommand(
            message,
            queue=queue,
            headers=headers,
            correlation_id=correlation_id or self.config.id_generator(),
            reply_to=reply_to,
            options=DeliveryOptions.given(**options),
            connection=connection,
            topic=topic,
            _publish_type=PublishType.PUBLISH,
        )
        result: int | list[int] = await self._basic_publish(cmd, producer=self.config.producer)
        return result

    @override
    async def publish_batch(
        self,
        *messages: SendableMessage | Envelope,
        queue: str = "",
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        connection: Connection | None = None,
        topic: str | None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> list[int]:
        """Store many messages in one statement, all or none; returns their ids in order.
        With `topic` instead of a queue, a copy of each in every queue bound to it:
        the ids queue by queue (queue-name order), each queue's in message order.

        The call's headers and options apply to every message; an `Envelope` item adds
        headers and options of its own.

        Args:
            *messages: the bodies, or `Envelope`s of a body with its own headers and
                options.
            queue: the target queue.
            topic: instead of `queue`: every queue bound to it gets a copy of each
                message (docs/topics.md).
            headers: headers of every message.
            correlation_id: the correlation id of every message (default: each
                message its own, made from one `id_generator()` value per call).
            connection: an `AsyncConnection` or `AsyncSession` whose transaction the
                insert joins; without it the batch commits alone.
            **options: delivery options of every message (`DeliveryOptionArgs`).
        """
        check_batch_arguments(messages)
        if not messages:
            return []
        cmd = SqlaPublishCommand(
            *messages,
            queue=queue,
            headers=headers,
            correlation_id=correlation_id,
            options=DeliveryOptions.given(**options),
            connection=connection,
            topic=topic,
            _publish_type=PublishType.PUBLISH,
        )
        result: list[int] = await self._basic_publish_batch(cmd, producer=self.config.producer)
        return result

    @override
    async def request(self, *args: Any, **kwargs: Any) -> Any:
        cmd = SqlaPublishCommand(None, _publish_type=PublishType.REQUEST)
        return await self.config.producer.request(cmd)
