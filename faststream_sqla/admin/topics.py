"""Bindings of topic patterns to queues, as the admin API changes and lists them
(docs/topics.md). The statements are in faststream_sqla.drivers.topics; the
matching rule is faststream_sqla.topics."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.clock import to_aware
from faststream_sqla.drivers import Driver
from faststream_sqla.drivers import topics as store
from faststream_sqla.schema import QueueTables, validate_queue_name
from faststream_sqla.topics import checked_pattern, checked_topic, route_targets

from .models import Binding, TopicRoute


async def bind(driver: Driver, engine: AsyncEngine, pattern: str, queue: str) -> bool:
    checked_pattern(pattern)
    validate_queue_name(queue)
    async with driver.own_transaction(engine) as conn:
        return await store.bind(conn, driver.tables, [(pattern, queue)]) > 0


async def unbind(driver: Driver, engine: AsyncEngine, pattern: str, queue: str) -> bool:
    checked_pattern(pattern)
    validate_queue_name(queue)
    async with driver.own_transaction(engine) as conn:
        return await store.unbind(conn, driver.tables, pattern, queue)


async def bindings(
    conn: AsyncConnection, tables: QueueTables, *, queue: str | None = None
) -> list[Binding]:
    if queue is not None:
        validate_queue_name(queue)
    return [
        Binding(pattern=row.pattern, queue=row.queue, created_at=to_aware(row.created_at))
        for row in await store.bindings(conn, tables, queue=queue)
    ]


async def route(conn: AsyncConnection, driver: Driver, topic: str) -> TopicRoute:
    """The queues and endpoints a publish to `topic` writes to: the targets a publish
    computes (`route_targets`) from the same one read."""
    checked_topic(topic)
    candidates = await store.candidate_targets(conn, driver.tables, topic, lambda stmt: stmt)
    targets = route_targets(candidates, topic)
    return TopicRoute(
        queues=[queue for queue, endpoint in targets if endpoint is None],
        endpoints=[endpoint for _, endpoint in targets if endpoint is not None],
    )
