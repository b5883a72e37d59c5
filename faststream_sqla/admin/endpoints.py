"""HTTP endpoints as the admin API adds, changes and lists them (docs/webhooks.md). The
checks are faststream_sqla.endpoints, the statements faststream_sqla.drivers.endpoints;
an endpoint's limits and pause are its channel of the delivery queue (admin/channels.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from faststream_sqla.channels.store import UNSET, LimitChange, change_row_in
from faststream_sqla.clock import to_aware
from faststream_sqla.drivers import Driver
from faststream_sqla.drivers import endpoints as store
from faststream_sqla.endpoints import (
    DEFAULT_RETRY_SCHEDULE,
    check_address,
    checked_headers,
    checked_name,
    checked_retry_schedule,
    checked_secret,
    checked_timeout,
    checked_url,
    new_secret,
    secret_hint,
)
from faststream_sqla.exceptions import (
    EndpointExistsError,
    InvalidEndpointError,
    UnknownEndpointError,
    shown,
)
from faststream_sqla.schema import DELIVERY_QUEUE, QueueTables
from faststream_sqla.topics import checked_pattern

from .channels import channel_change
from .models import Attempt, Endpoint, NewSecret

#: how long a rotated-out secret stays valid by default: receivers have a day to
#: change theirs
DEFAULT_GRACE = timedelta(hours=24)
MAX_GRACE = timedelta(days=30)


def endpoint_model(row: store.EndpointRow) -> Endpoint:
    return Endpoint(
        name=row.name,
        url=row.url,
        topics=row.topics,
        secret_hint=secret_hint(row.secret),
        rotating=row.previous_secret is not None,
        timeout=row.timeout,
        # names only: a value is often a credential (the URL may hold none)
        header_names=tuple(sorted(row.headers or {})),
        allow_private=row.allow_private,
        retry_schedule=tuple(
            DEFAULT_RETRY_SCHEDULE if row.retry_schedule is None else row.retry_schedule
        ),
        disabled_at=None if row.disabled_at is None else to_aware(row.disabled_at),
        disabled_reason=row.disabled_reason,
        created_at=to_aware(row.created_at),
    )


async def add_endpoint(
    driver: Driver,
    engine: AsyncEngine,
    name: str,
    url: str,
    *,
    topics: Sequence[str],
    secret: str | None,
    max_concurrency: object,
    rate: object,
    timeout: float,
    headers: Mapping[str, str] | None,
    allow_private: bool,
    retry_schedule: Sequence[float] | None,
) -> NewSecret:
    name, url = checked_name(name), checked_url(url)
    if isinstance(topics, str):
        msg = f"topics must be a list of patterns, got the str {shown(topics)}"
        raise InvalidEndpointError(msg)
    patterns = [checked_pattern(pattern) for pattern in topics]
    if not isinstance(allow_private, bool):
        msg = f"allow_private must be True or False, got {shown(allow_private)}"
        raise InvalidEndpointError(msg)
    values: dict[str, Any] = {
        "name": name,
        "url": url,
        "secret": new_secret() if secret is None else checked_secret(secret),
        "timeout": checked_timeout(timeout),
        "headers": checked_headers(headers),
        "allow_private": allow_private,
        "retry_schedule": checked_retry_schedule(retry_schedule),
    }
    change = None
    if max_concurrency is not None or rate is not None:
        change = channel_change(name, max_concurrency=max_concurrency, rate=rate)
    await check_address(url, allow_private=allow_private)
    # the endpoint and its limits commit together: never one without the other
    async with driver.channel_transaction(engine) as conn:
        if not await store.insert_endpoint(conn, driver.tables, values, patterns):
            msg = f"endpoint {shown(name)} exists already"
            raise EndpointExistsError(msg)
        if change is not None:
            await change_row_in(driver, conn, DELIVERY_QUEUE, name, change)
    return NewSecret(endpoint=name, secret=values["secret"])


async def update_endpoint(
    driver: Driver,
    engine: AsyncEngine,
    name: str,
    *,
    url: object,
    timeout: object,
    headers: object,
    allow_private: object,
    retry_schedule: object,
) -> None:
    """Change the settings given (not UNSET) of endpoint `name`, checked before
    anything is written; a new URL or allow_private is checked against the
    private-address rule with the other's stored value."""
    name = checked_name(name)
    values: dict[str, Any] = {}
    if url is not UNSET:
        values["url"] = checked_url(url)
    if timeout is not UNSET:
        values["timeout"] = checked_timeout(timeout)
    if headers is not UNSET:
        values["headers"] = checked_headers(headers)
    if allow_private is not UNSET:
        if not isinstance(allow_private, bool):
            msg = f"allow_private must be True or False, got {shown(allow_private)}"
            raise InvalidEndpointError(msg)
        values["allow_private"] = allow_private
    if retry_schedule is not UNSET:
        values["retry_schedule"] = checked_retry_schedule(retry_schedule)
    if not values:
        msg = "nothing to change: give url, timeout, headers, allow_private or retry_schedule"
        raise InvalidEndpointError(msg)
    if "url" in values or "allow_private" in values:
        async with driver.own_transaction(engine) as conn:
            found = await store.endpoint_rows(conn, driver.tables, [name])
        if not found:
            raise UnknownEndpointError(f"no endpoint {shown(name)}")
        # resolved outside the transaction: a slow resolver must hold no row lock
        await check_address(
            values.get("url", found[0].url),
            allow_private=values.get("allow_private", found[0].allow_private),
        )
    async with driver.own_transaction(engine) as conn:
        if not await store.update_endpoint(conn, driver.tables, name, values):
            raise UnknownEndpointError(f"no endpoint {shown(name)}")


async def endpoints(
    conn: AsyncConnection, tables: QueueTables, names: Sequence[str] | None = None
) -> list[Endpoint]:
    return [endpoint_model(row) for row in await store.endpoint_rows(conn, tables, names)]


async def set_endpoint_disabled(
    driver: Driver, engine: AsyncEngine, name: str, reason: str | None
) -> bool:
    """Disable endpoint `name` (`reason` given) or enable it (None): a disabled one gets
    no new deliveries and its channel is paused, so its pending ones wait. The endpoint
    and its channel change in one transaction. Whether the endpoint changed."""
    name = checked_name(name)
    async with driver.channel_transaction(engine) as conn:
        changed = await store.set_disabled(conn, driver.tables, name, reason)
        if changed is None:
            raise UnknownEndpointError(f"no endpoint {shown(name)}")
        # written even when the endpoint had not changed: enabling again resumes a
        # channel that someone paused by hand
        await change_row_in(
            driver, conn, DELIVERY_QUEUE, name, LimitChange(paused=reason is not None)
        )
    return changed


async def remove_endpoint(driver: Driver, engine: AsyncEngine, name: str) -> int:
    name = checked_name(name)
    async with driver.own_transaction(engine) as conn:
        dropped = await store.delete_endpoint(conn, driver.tables, name)
    if dropped is None:
        raise UnknownEndpointError(f"no endpoint {shown(name)}")
    return dropped


async def rotate_secret(
    driver: Driver, engine: AsyncEngine, name: str, secret: str | None, grace: timedelta
) -> NewSecret:
    name = checked_name(name)
    if not isinstance(grace, timedelta) or not timedelta(0) <= grace <= MAX_GRACE:
        msg = f"grace must be a timedelta of 0 to {MAX_GRACE.days} days, got {shown(grace)}"
        raise InvalidEndpointError(msg)
    value = new_secret() if secret is None else checked_secret(secret)
    async with driver.own_transaction(engine) as conn:
        if not await store.set_secret(conn, driver.tables, name, value, grace):
            raise UnknownEndpointError(f"no endpoint {shown(name)}")
    return NewSecret(endpoint=name, secret=value)


async def subscribe(driver: Driver, engine: AsyncEngine, name: str, pattern: str) -> bool:
    name, pattern = checked_name(name), checked_pattern(pattern)
    async with driver.own_transaction(engine) as conn:
        if not await store.lock_endpoint(conn, driver.tables, name):
            raise UnknownEndpointError(f"no endpoint {shown(name)}")
        return await store.add_topics(conn, driver.tables, name, [pattern]) > 0


async def unsubscribe(driver: Driver, engine: AsyncEngine, name: str, pattern: str) -> bool:
    name, pattern = checked_name(name), checked_pattern(pattern)
    async with driver.own_transaction(engine) as conn:
        return await store.remove_topic(conn, driver.tables, name, pattern)


async def attempts(conn: AsyncConnection, tables: QueueTables, message_id: int) -> list[Attempt]:
    return [
        Attempt(
            message_id=row.message_id,
            endpoint=row.endpoint,
            attempt=row.attempt,
            at=to_aware(row.at),
            status=row.status,
            latency=row.latency,
            error=row.error,
            response_body=row.response_body,
        )
        for row in await store.attempts_of(conn, tables, message_id)
    ]
