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
from faststream_sqla.worker_registry import WorkerRegistry

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from faststream_sqla.drivers import Driver


@dataclass(kw_only=True)
class SqlaBrokerConfig(BrokerConfig):
    producer: SqlaProducer = field(default_factory=SqlaProducer)
    tables: QueueTables = field(default_factory=QueueTables)
    wakeups: WakeupHub = field(default_factory=WakeupHub)
    vacuum: MessageTableVacuum = field(default_factory=MessageTableVacuum)
    stall_watch: LoopStallWatch = field(default_factory=LoopStallWatch)
    health: DatabaseHealth = field(default_factory=DatabaseHealth)
    #: this process's row in the workers table while the broker runs
    workers: WorkerRegistry = field(default_factory=WorkerRegistry)
    #: set while TestSqlaBroker runs the broker in memory: its fake producer calls the
    #: handlers, so subscribers started meanwhile run no loops
    in_memory: bool = field(default=False, init=False)
    _engine: AsyncEngine | None = field(default=None, init=False, repr=False)
    _driver: Driver | None = field(default=None, init=False, repr=False)

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            msg = "the broker is not connected: call `await broker.connect()` or start the app"
            raise IncorrectState(msg)
        return self._engine

    @property
    def driver(self) -> Driver:
        if self._driver is None:
            msg = "the broker is not connected: call `await broker.connect()` or start the app"
            raise IncorrectState(msg)
        return self._driver

    def connect(self, engine: AsyncEngine, driver: Driver) -> None:
        self._engine, self._driver = engine, driver
        self.producer.connect(
            engine,
            driver,
            self.wakeups,
            serializer_of(self.fd_config),
            self.broker_codec,
            self.health,
        )

        def log(level: int, message: str) -> None:
            self.logger.log(message, level, {"queue": "", "message_id": ""})

        self.vacuum.connect(engine, driver, log)
        self.stall_watch.log = log
        self.health.connect(engine, driver, log)
        self.workers.connect(engine, driver, log, self.health)

    def disconnect(self) -> None:
        self._engine = self._driver = None
        self.producer.disconnect()
