"""`broker.publisher("queue")`: publish from anywhere, or decorate a handler."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, overload

from faststream._internal.endpoint.publisher import PublisherUsecase
from faststream.response.publish_type import PublishType
from typing_extensions import Unpack, override

from faststream_sqla.options import DeliveryOptionArgs, DeliveryOptions, Envelope
from faststream_sqla.response import Connection, SqlaPublishCommand, check_batch_arguments

if TYPE_CHECKING:
    from faststream._internal.basic_types import SendableMessage
    from faststream._internal.endpoint.publisher import PublisherSpecification
    from faststream._internal.types import PublisherMiddleware
    from faststream.response.response import PublishCommand

    from faststream_sqla.broker_config import SqlaBrokerConfig

    from .config import SqlaPublisherConfig


class SqlaPublisher(PublisherUsecase):
    _outer_config: SqlaBrokerConfig

    def __init__(
        self, config: SqlaPublisherConfig, specification: PublisherSpecification[Any, Any]
    ) -> None:
        super().__init__(config, specification)
        self._queue = config.queue
        self.headers = config.headers or {}

    @property
    def queue(self) -> str:
        return f"{self._outer_config.prefix}{self._queue}"

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
        """Insert one message; returns its id. With `topic`, a copy in each queue
        bound to it instead of this publisher's queue; returns their ids. See
        `SqlaBroker.publish`."""
        cmd = SqlaPublishCommand(
            message,
            queue=self._target(queue, topic),
            headers=self.headers | (headers or {}),
            correlation_id=correlation_id or self._outer_config.id_generator(),
            reply_to=reply_to,
            options=DeliveryOptions.given(**options),
            connection=connection,
            topic=topic,
            _publish_type=PublishType.PUBLISH,
        )
        result: int | list[int] = await self._basic_publish(
            cmd, producer=self._outer_config.producer, _extra_middlewares=()
        )
        return result

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
        """Insert many messages in one statement; returns their ids in order. With
        `topic`, a copy of each in every queue bound to it. See
        `SqlaBroker.publish_batch`."""
        check_batch_arguments(messages)
        if not messages:
            return []
        cmd = SqlaPublishCommand(
            *messages,
            queue=self._target(queue, topic),
            headers=self.headers | (headers or {}),
            correlation_id=correlation_id,
            options=DeliveryOptions.given(**options),
            connection=connection,
            topic=topic,
            _publish_type=PublishType.PUBLISH,
        )
        result: list[int] = await self._basic_publish_batch(
            cmd, producer=self._outer_config.producer, _extra_middlewares=()
        )
        return result

    def _target(self, queue: str, topic: str | None) -> str:
        """The queue of a publish: the one given, else this publisher's, unless the
        publish goes to a topic (whose bindings name the queues)."""
        return queue if queue or topic is not None else self.queue

    @override
    async def _publish(
        self, cmd: PublishCommand, *, _extra_middlewares: Iterable[PublisherMiddleware]
    ) -> None:
        """Publishes a handler's return value (subscriber flow)."""
        real = SqlaPublishCommand.from_cmd(cmd)
        real.destination = self.queue
        real.add_headers(self.headers, override=False)
        await self._basic_publish(
            real, producer=self._outer_config.producer, _extra_middlewares=_extra_middlewares
        )

    @override
    async def request(self, *args: Any, **kwargs: Any) -> Any:
        cmd = SqlaPublishCommand(None, queue=self.queue, _publish_type=PublishType.REQUEST)
        return await self._outer_config.producer.request(cmd)
