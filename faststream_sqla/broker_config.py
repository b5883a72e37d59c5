"""Broker-wide state shared by every subscriber and publisher of one broker: below
the broker, its subscribers and its publishers, which all hold it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from faststream._internal.configs import (
    BrokerConfig,
)
from faststream.exceptions import IncorrectState

from faststream_sqla._faststream import serializer_of
from faststream_sqla.health import DatabaseHealth
from faststream_sqla.producer import SqlaProducer
from faststream_sqla.schema import QueueTables
from faststream_sqla.stall import LoopStallWatch
from faststream_sqla.vacuum import MessageTableVacuum
from faststream_sqla.wakeup import WakeupHub

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.dialects import Dialect


@dataclass(kw_only=True)
class SqlaBrokerConfig(BrokerConfig):
    producer: SqlaProducer = field(default_factory=SqlaProducer)
    tables: QueueTables = field(default_factory=QueueTables)
    wakeups: WakeupHub = field(default_factory=WakeupHub)
    vacuum: MessageTableVacuum = field(default_factory=MessageTableVacuum)
    stall_watch: LoopStallWatch = field(default_factory=LoopStallWatch)
    health: DatabaseHealth = field(default_factory=DatabaseHealth)
    #: set while TestSqlaBroker runs the broker in memory: its fake producer calls the
    #: handlers, so subscribers started meanwhile run no loops
    in_memory: bool = field(default=False, init=False)
    _engine: AsyncEngine | None = field(default=None, init=False, repr=False)
    _dialect: Dialect | None = field(default=None, init=False, repr=False)

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            msg = "the broker is not connected: call `await broker.connect()` or start the app"
            raise IncorrectState(msg)
        return self._engine

    @property
    def dialect(self) -> Dialect:
        if self._dialect is None:
            msg = "the broker is not connected: call `await broker.connect()` or start the app"
            raise IncorrectState(msg)
        return self._dialect

    def connect(self, engine: AsyncEngine, dialect: Dialect) -> None:
        self._engine, self._dialect = engine, dialect
        self.producer.connect(
            engine,
            dialect,
            self.wakeups,
            serializer_of(self.fd_config),
            self.broker_codec,
            self.health,
        )

        def log(level: int, message: str) -> None:
            self.logger.log(message, level, {"queue": "", "message_id": ""})

        self.vacuum.connect(engine, dialect, log)
        self.stall_watch.log = log
        self.health.connect(engine, dialect, log)

    def disconnect(self) -> None:
        self._engine = self._dialect = None
        self.producer.disconnect()
