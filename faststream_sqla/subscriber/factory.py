"""Builds a subscriber from `broker.subscriber(...)` arguments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.endpoint.subscriber.call_item import CallsCollection

from faststream_sqla.exceptions import InvalidOptionError, InvalidQueueNameError
from faststream_sqla.schema import validate_queue_name
from faststream_sqla.topics import checked_pattern

from .config import ConsumeOptions, SqlaSubscriberConfig, SqlaSubscriberSpecificationConfig
from .specification import SqlaSubscriberSpecification
from .usecase import SqlaSubscriber

if TYPE_CHECKING:
    from faststream.middlewares import AckPolicy

    from faststream_sqla.broker_config import SqlaBrokerConfig


def normalize_queues(queues: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(queues, str):
        names: tuple[str, ...] = (queues,)
    elif isinstance(queues, (list, tuple)):
        names = tuple(queues)
    else:
        msg = f"queues must be a queue name or a list of them, got {type(queues).__name__}"
        raise InvalidQueueNameError(msg)
    if not names:
        msg = "subscriber needs at least one queue name"
        raise InvalidOptionError(msg)
    for name in names:
        validate_queue_name(name)
    if len(set(names)) != len(names):
        msg = f"queue names repeat: {list(names)}"
        raise InvalidOptionError(msg)
    return names


def normalize_topics(topics: str | Sequence[str]) -> tuple[str, ...]:
    """The patterns of `subscriber(topics=...)`, each checked, repeats dropped."""
    if isinstance(topics, str):
        patterns: tuple[str, ...] = (topics,)
    elif isinstance(topics, (list, tuple)):
        patterns = tuple(topics)
    else:
        msg = f"topics must be a topic pattern or a list of them, got {type(topics).__name__}"
        raise InvalidOptionError(msg)
    return tuple(dict.fromkeys(checked_pattern(p) for p in patterns))


def create_subscriber(
    *,
    queues: str | Sequence[str],
    options: ConsumeOptions,
    ack_policy: AckPolicy,
    no_reply: bool,
    batch: bool = False,
    middlewares: Sequence[Any] = (),
    config: SqlaBrokerConfig,
    title_: str | None,
    description_: str | None,
    include_in_schema: bool,
    topics: str | Sequence[str] = (),
) -> SqlaSubscriber:
    names = normalize_queues(queues)
    patterns = normalize_topics(topics)
    subscriber_config = SqlaSubscriberConfig(
        queues=names,
        topics=patterns,
        options=options,
        middlewares=middlewares,
        batch=batch,
        no_reply=no_reply,
        _outer_config=config,
        _ack_policy=ack_policy,
    )
    calls = CallsCollection[Any]()
    specification = SqlaSubscriberSpecification(
        config,
        SqlaSubscriberSpecificationConfig(
            queues=names,
            topics=patterns,
            title_=title_,
            description_=description_,
            include_in_schema=include_in_schema,
        ),
        calls,
    )
    return SqlaSubscriber(subscriber_config, specification, calls)
