"""`TestSqlaBroker`: run handlers in memory, no database, the FastStream way."""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast
from unittest.mock import MagicMock, patch

from faststream._internal.testing.broker import TestBroker, change_producer
from typing_extensions import override

from faststream_sqla._faststream import serializer_of
from faststream_sqla.broker.broker import SqlaBroker
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.producer import SqlaProducer, fan_out
from faststream_sqla.response import SqlaPublishCommand
from faststream_sqla.topics import route

if TYPE_CHECKING:
    from faststream_sqla.publisher.usecase import SqlaPublisher
    from faststream_sqla.subscriber.usecase import SqlaSubscriber

__all__ = ("TestSqlaBroker",)


class TestSqlaBroker(TestBroker[SqlaBroker, Any], broker=SqlaBroker):
    """In-memory test client.

    ```python
    async with TestSqlaBroker(broker) as br:
        await br.publish({"id": 1}, queue="orders")
        handle.mock.assert_called_once_with({"id": 1})
    ```

    Publishing calls matching handlers directly; retries, delays and persistence are
    not simulated. `TestSqlaBroker(broker, with_real=True)` uses the real database.
    """

    @override
    def create_publisher_fake_subscriber(
        self, broker: SqlaBroker, publisher: SqlaPublisher
    ) -> tuple[SqlaSubscriber, bool]:
        for sub in _subscribers(self.brokers):
            if publisher.queue in sub.queues:
                return sub, True
        return broker.subscriber(publisher.queue, persistent=False), False

    @contextmanager
    def _patch_broker(self, broker: SqlaBroker) -> Generator[None, None, None]:
        # in memory: a subscriber started meanwhile (`await sub.start()`) polls nothing
        with (
            super()._patch_broker(broker),
            patch.object(broker.config.broker_config, "in_memory", True),
        ):
            yield

    @contextmanager
    def _patch_producer(self, broker: SqlaBroker) -> Generator[None, None, None]:
        with change_producer(broker.config.broker_config, FakeProducer(broker, self.brokers)):
            yield

    # The base declares None, but connect() keeps what _connect returns as the broker's
    # connection, and None there means "not connected".
    @override
    async def _fake_connect(  # type: ignore[override]
        self, broker: SqlaBroker, *args: Any, **kwargs: Any
    ) -> MagicMock:
        return MagicMock()


def _subscribers(brokers: tuple[SqlaBroker, ...]) -> Iterator[SqlaSubscriber]:
    for b in brokers:
        yield from cast("list[SqlaSubscriber]", list(b.subscribers))


class FakeProducer(SqlaProducer):
    """Validates and encodes like the real producer, then calls handlers in process."""

    def __init__(self, broker: SqlaBroker, brokers: tuple[SqlaBroker, ...]) -> None:
        super().__init__(parser=broker._parser, decoder=broker._decoder)
        self._ids = itertools.count(1)
        self.brokers = brokers
        self.serializer = serializer_of(broker.config.fd_config)
        self.id_generator = broker.config.broker_config.producer.id_generator
        if broker.config.broker_codec is not None:
            self.codec = broker.config.broker_codec

    async def _insert(self, cmd: SqlaPublishCommand, bodies: tuple[Any, ...]) -> list[int]:
        rows = await self.build_rows(cmd, bodies)
        if cmd.topic is not None:
            # the subscribers' own topics= stand for the bindings table
            bound = [pair for sub in _subscribers(self.brokers) for pair in sub.bindings]
            targets = [(queue, None) for queue in route(bound, cmd.topic)]
            rows = fan_out(rows, targets, cmd.topic)
        ids = []
        for row in rows:
            now = datetime.now(timezone.utc).replace(tzinfo=None)  # stored times are naive UTC
            raw = ClaimedMessage(
                id=next(self._ids),
                queue=row.queue,
                headers=dict(row.headers),
                payload=row.payload,
                attempts_count=0,
                deliveries_count=1,
                created_at=now,
                next_attempt_at=now,
                acquired_at=now,
                correlation_id=row.correlation_id,
                expires_at=row.expires_at,
                priority=row.priority,
                ordering_key=row.ordering_key,
                channel=row.channel,
            )
            ids.append(raw.id)
            for sub in _subscribers(self.brokers):
                if raw.queue in sub.queues:
                    await sub.process_message([raw] if sub.batch else raw)
        return ids
