"""`SqlaBroker`: a FastStream broker whose queues are tables in your database."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from fast_depends import Provider, dependency_provider
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typing_extensions import Unpack, override

from faststream._internal.broker import BrokerUsecase
from faststream._internal.constants import EMPTY
from faststream._internal.context.repository import ContextRepo
from faststream._internal.di import FastDependsConfig
from faststream.message import gen_cor_id
from faststream.middlewares import AckPolicy
from faststream.response.publish_type import PublishType
from faststream.specification.schema import BrokerSpec

from faststream_sqla.broker.config import SqlaBrokerConfig
from faststream_sqla.dialects import dialect_for
from faststream_sqla.dialects.base import NotificationListener, reading
from faststream_sqla.exceptions import DatabaseUnreachableError, InvalidOptionError
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.migrations import check_schema
from faststream_sqla.options import DeliveryOptionArgs, DeliveryOptions, Envelope
from faststream_sqla.publisher.producer import QueueLimits, SqlaProducer
from faststream_sqla.response import Connection, SqlaPublishCommand
from faststream_sqla.schedules import ScheduleRunner
from faststream_sqla.schema import QueueTables, TableNames
from faststream_sqla.urls import masked, parse_url
from faststream_sqla.vacuum import MessageTableVacuum

from .logging import make_sqla_logger_state
from .registrator import SqlaRegistrator

if TYPE_CHECKING:
    from types import TracebackType

    from fast_depends.dependencies import Dependant
    from fast_depends.library.serializer import SerializerProto

    from faststream._internal.basic_types import LoggerProto, SendableMessage
    from faststream._internal.parser import CodecProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable
    from faststream.security import BaseSecurity
    from faststream.specification.schema.extra import Tag, TagDict

DEFAULT_URL = "sqlite+aiosqlite:///faststream_sqla.db"


class SqlaBroker(SqlaRegistrator, BrokerUsecase[ClaimedMessage, AsyncEngine, SqlaBrokerConfig]):
    """Durable queues in PostgreSQL, MySQL/MariaDB or SQLite.

    `url_or_engine` is a SQLAlchemy async URL (the broker owns and disposes that engine)
    or an `AsyncEngine` you own, e.g. the one your application already uses.
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
        engine_options: dict[str, Any] | None = None,
        graceful_timeout: float | None = 15.0,
        decoder: CustomCallable | None = None,
        parser: CustomCallable | None = None,
        codec: CodecProto | None = None,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        routers: Iterable[SqlaRegistrator] = (),
        ack_policy: AckPolicy = EMPTY,
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
        if not isinstance(fast_publish, bool):
            msg = f"fast_publish must be True or False, got {fast_publish!r}"
            raise InvalidOptionError(msg)
        producer.fast_publish = fast_publish
        tables = QueueTables(
            TableNames(message=message_table, archive=archive_table),
            dialect=url.get_backend_name(),
        )
        super().__init__(
            url_or_engine=url_or_engine,
            engine_options=engine_options or {},
            validate_schema=validate_schema,
            routers=routers,
            config=SqlaBrokerConfig(
                producer=producer,
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
                id_generator=gen_cor_id,
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
        #: the cross-process wake-up listener while running (PostgreSQL), else None
        self.notifications: NotificationListener | None = None
        #: fires the declared schedules while running, None when there are none
        self.schedule_runner: ScheduleRunner | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The engine in use (connect first)."""
        return self.config.engine

    @property
    def tables(self) -> QueueTables:
        return self.config.tables

    @override
    async def _connect(self) -> AsyncEngine:
        target = self._connection_kwargs["url_or_engine"]
        owned = not isinstance(target, AsyncEngine)
        if owned:
            try:
                engine = create_async_engine(target, **self._connection_kwargs["engine_options"])
            except (ImportError, sa.exc.ArgumentError, sa.exc.InvalidRequestError) as e:
                msg = (
                    f"cannot use {masked(self.url)}: {e}. Use an async driver: "
                    "postgresql+asyncpg://, mysql+asyncmy:// or sqlite+aiosqlite:///"
                )
                raise InvalidOptionError(msg) from e
        else:
            engine = target
        try:
            dialect = dialect_for(engine, self.config.tables)
        except InvalidOptionError:
            if owned:
                await engine.dispose()
            raise
        dialect.configure_engine(engine, owned=owned)
        try:
            async with reading(engine) as conn:
                await conn.execute(sa.text("SELECT 1"))
            await dialect.prepare(engine)
        except Exception as e:
            if owned:
                await engine.dispose()
            msg = f"cannot reach the database at {masked(self.url)}: {e}"
            raise DatabaseUnreachableError(msg) from e
        if self._connection_kwargs["validate_schema"]:
            try:
                await check_schema(engine, dialect.tables)
            except Exception:
                if owned:
                    await engine.dispose()
                raise
        self._owns_engine = owned
        self.config.connect(engine, dialect)
        return engine

    @override
    def _setup_logger(self) -> None:
        # FastStream sets the logger up once connected: the first moment we can warn
        # about settings that the database turned out not to support
        super()._setup_logger()
        if not self.config.producer.fast_publish or self._connection is None:
            return
        dialect = self.config.dialect
        if not dialect.relaxes_commits:
            self.config.logger.log(
                f"fast_publish has no effect on {dialect.name}: every publish is committed "
                "durably (only PostgreSQL can relax one transaction's commit)",
                logging.WARNING, {"queue": "", "message_id": ""},
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
                logging.INFO, {"queue": "", "message_id": ""},
            )
        await super().start()
        await self._start_notifications()
        await self._start_schedules()

    async def _start_schedules(self) -> None:
        """Write and fire the declared schedules; nothing at all without any."""
        if not self.schedules or self.schedule_runner is not None:
            return
        config = self.config

        def log(level: int, message: str) -> None:
            config.logger.log(message, level, {"queue": "", "message_id": ""})

        runner = ScheduleRunner(self.schedules, self.publish, log)
        await runner.start(
            config.engine, config.dialect, config.producer.codec, config.producer.serializer,
            config.health,
        )
        self.schedule_runner = runner

    async def _start_notifications(self) -> None:
        """Hear publishes from other processes where the database can tell us."""
        consumed = {q for sub in self.subscribers if sub.calls for q in sub.queues}  # type: ignore[attr-defined]
        if not consumed or self.notifications is not None:
            return
        wakeups, health = self.config.wakeups, self.config.health

        def log(level: int, message: str) -> None:
            self.config.logger.log(message, level, {"queue": "", "message_id": ""})

        listener = self.config.dialect.listener(
            self.config.engine,
            on_queue=lambda queue: wakeups.wake((queue,)),
            on_reconnect=lambda: wakeups.wake(consumed),
            log=log,
            noticed=health.noticed,
        )
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

    @override
    async def ping(self, timeout: float | None = None) -> bool:
        if self._connection is None:
            return False
        engine = self._connection

        async def probe() -> None:
            async with reading(engine) as conn:
                await conn.execute(sa.text("SELECT 1"))

        try:
            await asyncio.wait_for(probe(), timeout or 5.0)
        except Exception:  # noqa: BLE001 - any failure means "not healthy"
            return False
        return True

    @override
    async def publish(  # type: ignore[override]
        self,
        message: SendableMessage = None,
        queue: str = "",
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        reply_to: str = "",
        connection: Connection | None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> int:
        """Store one message in `queue`; returns its id.

        Args:
            message: str, bytes, a dict/list (JSON) or a pydantic model.
            connection: an `AsyncConnection` or `AsyncSession` whose transaction the
                insert joins (transactional outbox); without it the publish commits alone.
            **options: delivery options (`faststream_sqla.options.DeliveryOptionArgs`):
                `next_attempt_at` (aware datetime before which it is not delivered) or
                `delay` (seconds or timedelta from now on the database clock).
        """
        cmd = SqlaPublishCommand(
            message,
            queue=queue,
            headers=headers,
            correlation_id=correlation_id or self.config.id_generator(),
            reply_to=reply_to,
            options=DeliveryOptions.given(**options),
            connection=connection,
            _publish_type=PublishType.PUBLISH,
        )
        result: int = await self._basic_publish(cmd, producer=self.config.producer)
        return result

    @override
    async def publish_batch(  # type: ignore[override]
        self,
        *messages: SendableMessage | Envelope,
        queue: str,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        connection: Connection | None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> list[int]:
        """Store many messages in one statement, all or none; returns their ids in order.

        The call's headers and options apply to every message; an `Envelope` item adds
        headers and options of its own.
        """
        if not messages:
            return []
        cmd = SqlaPublishCommand(
            *messages,
            queue=queue,
            headers=headers,
            correlation_id=correlation_id,
            options=DeliveryOptions.given(**options),
            connection=connection,
            _publish_type=PublishType.PUBLISH,
        )
        result: list[int] = await self._basic_publish_batch(cmd, producer=self.config.producer)
        return result

    @override
    async def request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        cmd = SqlaPublishCommand(None, _publish_type=PublishType.REQUEST)
        return await self.config.producer.request(cmd)
