"""`SqlaRouter`: group handlers under a queue-name prefix and include them in a broker."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.broker.router import ArgsContainer, BrokerRouter, SubscriberRoute
from faststream._internal.constants import EMPTY
from faststream.middlewares import AckPolicy

from faststream_sqla.broker_config import SqlaBrokerConfig
from faststream_sqla.message import ClaimedMessage

from .broker import driver_annotations
from .registrator import SqlaRegistrator

if TYPE_CHECKING:
    from fast_depends.dependencies import Dependant
    from faststream._internal.basic_types import SendableMessage
    from faststream._internal.types import BrokerMiddleware, CustomCallable


class SqlaPublisherArgs(ArgsContainer):
    """`publisher(...)` arguments, kept for a `SqlaRoute`."""

    def __init__(self, queue: str, **kwargs: Any) -> None:
        super().__init__(queue, **kwargs)


class SqlaRoute(SubscriberRoute):
    """A handler and its `subscriber(...)` arguments, registered when included."""

    def __init__(
        self,
        call: Callable[..., SendableMessage] | Callable[..., Awaitable[SendableMessage]],
        queues: str | Sequence[str],
        *,
        publishers: Iterable[SqlaPublisherArgs] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(call, queues, publishers=publishers, **kwargs)


class SqlaRouter(SqlaRegistrator, BrokerRouter[ClaimedMessage, SqlaBrokerConfig]):
    """Prefix is prepended to every subscriber and publisher queue of the router."""

    def __init__(
        self,
        prefix: str = "",
        handlers: Iterable[SqlaRoute] = (),
        *,
        dependencies: Sequence[Dependant] = (),
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        routers: Iterable[SqlaRegistrator] = (),
        parser: CustomCallable | None = None,
        decoder: CustomCallable | None = None,
        include_in_schema: bool | None = None,
        ack_policy: AckPolicy = EMPTY,
    ) -> None:
        super().__init__(
            handlers=handlers,
            config=SqlaBrokerConfig(
                default_driver_annotations=driver_annotations(),
                prefix=prefix,
                ack_policy=ack_policy,
                broker_dependencies=dependencies,
                broker_middlewares=middlewares,
                broker_parser=parser,
                broker_decoder=decoder,
                include_in_schema=include_in_schema,
            ),
            routers=routers,
        )
