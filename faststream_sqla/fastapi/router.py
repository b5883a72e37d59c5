"""`SqlaRouter`: FastStream's FastAPI router (`StreamRouter`) for database queues."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from fastapi.datastructures import Default
from fastapi.routing import APIRoute
from fastapi.utils import generate_unique_id
from faststream._internal.constants import EMPTY
from faststream._internal.context import ContextRepo
from faststream._internal.fastapi.router import StreamRouter
from faststream.middlewares import AckPolicy
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.responses import JSONResponse
from typing_extensions import override

from faststream_sqla.broker.broker import DEFAULT_URL, SqlaBroker
from faststream_sqla.message import ClaimedMessage

if TYPE_CHECKING:
    from enum import Enum

    from fastapi import params
    from fastapi.types import IncEx
    from faststream._internal.basic_types import LoggerProto
    from faststream._internal.types import BrokerMiddleware, CustomCallable
    from faststream.specification.base import SpecificationFactory
    from faststream.specification.schema.extra import Tag, TagDict
    from starlette.responses import Response
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Lifespan

    from faststream_sqla.publisher.usecase import SqlaPublisher
    from faststream_sqla.subscriber.usecase import SqlaSubscriber


class SqlaRouter(StreamRouter[ClaimedMessage]):
    """A FastAPI router with a `SqlaBroker`: `app.include_router(router)` starts the
    broker with the application (its lifespan) and stops it after.

    `router.subscriber(...)` takes `SqlaBroker.subscriber`'s options and FastAPI's
    (`dependencies=[Depends(...)]`, `response_model`...); handlers use FastAPI's
    `Depends`. Endpoints publish through `router.broker`, or take the broker as a
    dependency (`broker: faststream_sqla.fastapi.SqlaBroker`). Any other `SqlaBroker`
    option (`message_table`, `max_queue_size`, ...) is passed on as a keyword.
    """

    broker_class = SqlaBroker
    broker: SqlaBroker

    def __init__(
        self,
        url_or_engine: str | sa.URL | AsyncEngine = DEFAULT_URL,
        *,
        # broker options
        graceful_timeout: float | None = 15.0,
        decoder: CustomCallable | None = None,
        parser: CustomCallable | None = None,
        middlewares: Sequence[BrokerMiddleware[Any, Any]] = (),
        ack_policy: AckPolicy = EMPTY,
        # AsyncAPI
        specification_url: str | None = None,
        protocol: str | None = None,
        protocol_version: str | None = None,
        description: str | None = None,
        specification: SpecificationFactory | None = None,
        specification_tags: Iterable[Tag | TagDict] = (),
        # logging
        logger: LoggerProto | None = EMPTY,
        log_level: int = logging.INFO,
        # StreamRouter options
        setup_state: bool = True,
        schema_url: str | None = "/asyncapi",
        context: ContextRepo | None = None,
        # FastAPI options
        prefix: str = "",
        tags: list[str | Enum] | None = None,
        dependencies: Sequence[params.Depends] | None = None,
        default_response_class: type[Response] = Default(JSONResponse),
        responses: dict[int | str, dict[str, Any]] | None = None,
        callbacks: list[BaseRoute] | None = None,
        routes: list[BaseRoute] | None = None,
        redirect_slashes: bool = True,
        default: ASGIApp | None = None,
        dependency_overrides_provider: Any | None = None,
        route_class: type[APIRoute] = APIRoute,
        on_startup: Sequence[Callable[[], Any]] | None = None,
        on_shutdown: Sequence[Callable[[], Any]] | None = None,
        lifespan: Lifespan[Any] | None = None,
        deprecated: bool | None = None,
        include_in_schema: bool = True,
        generate_unique_id_function: Callable[[APIRoute], str] = Default(generate_unique_id),
        **broker_options: Any,
    ) -> None:
        super().__init__(
            url_or_engine,
            graceful_timeout=graceful_timeout,
            decoder=decoder,
            parser=parser,
            middlewares=middlewares,
            ack_policy=ack_policy,
            specification_url=specification_url,
            protocol=protocol,
            protocol_version=protocol_version,
            description=description,
            specification=specification,
            specification_tags=specification_tags,
            logger=logger,
            log_level=log_level,
            setup_state=setup_state,
            schema_url=schema_url,
            context=context,
            prefix=prefix,
            tags=tags,
            dependencies=dependencies,
            default_response_class=default_response_class,
            responses=responses,
            callbacks=callbacks,
            routes=routes,
            redirect_slashes=redirect_slashes,
            default=default,
            dependency_overrides_provider=dependency_overrides_provider,
            route_class=route_class,
            on_startup=on_startup,
            on_shutdown=on_shutdown,
            lifespan=lifespan,
            deprecated=deprecated,
            include_in_schema=include_in_schema,
            generate_unique_id_function=generate_unique_id_function,
            **broker_options,
        )

    # StreamRouter's subscriber and publisher take any broker's arguments and return
    # decorators; ours take SqlaBroker's and return its endpoints.
    @override
    def subscriber(  # type: ignore[override]
        self,
        queues: str | Sequence[str],
        *,
        dependencies: Iterable[params.Depends] = (),
        response_model: Any = Default(None),
        response_model_include: IncEx | None = None,
        response_model_exclude: IncEx | None = None,
        response_model_by_alias: bool = True,
        response_model_exclude_unset: bool = False,
        response_model_exclude_defaults: bool = False,
        response_model_exclude_none: bool = False,
        **subscriber_options: Any,
    ) -> SqlaSubscriber:
        """Consume `queues`: `SqlaBroker.subscriber`'s options, plus FastAPI's."""
        # StreamRouter declares a decorator and `NameRequired | str` names, but returns
        # the subscriber SqlaBroker.subscriber made, to which it hands `queues` as given
        sub: SqlaSubscriber = super().subscriber(  # type: ignore[assignment]
            queues,  # type: ignore[arg-type]
            dependencies=dependencies,
            response_model=response_model,
            response_model_include=response_model_include,
            response_model_exclude=response_model_exclude,
            response_model_by_alias=response_model_by_alias,
            response_model_exclude_unset=response_model_exclude_unset,
            response_model_exclude_defaults=response_model_exclude_defaults,
            response_model_exclude_none=response_model_exclude_none,
            **subscriber_options,
        )
        return sub

    @override
    def publisher(  # type: ignore[override]
        self,
        queue: str,
        *,
        headers: dict[str, Any] | None = None,
        title: str | None = None,
        description: str | None = None,
        schema: Any | None = None,
        include_in_schema: bool = True,
    ) -> SqlaPublisher:
        """A publisher for `queue`, as `SqlaBroker.publisher`."""
        return self.broker.publisher(
            queue,
            headers=headers,
            title=title,
            description=description,
            schema=schema,
            include_in_schema=include_in_schema,
        )
