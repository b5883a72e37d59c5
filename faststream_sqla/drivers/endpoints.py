"""Every statement on the endpoint tables: the endpoints, the topics that reach them,
and the attempts of their deliveries (docs/webhooks.md).

SQLAlchemy Core, the same on every database but for the idempotent insert of topics
(drivers.topics). The callers check names, URLs and patterns first
(faststream_sqla.endpoints, faststream_sqla.topics).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import DELIVERY_QUEUE, MessageState, QueueTables
from faststream_sqla.topics import pattern_root

from .topics import _insert_skipping_existing


@dataclass(frozen=True, slots=True)
class EndpointRow:
    """One endpoint as stored; times are naive UTC. Holds its secrets: never logged."""

    name: str
    url: str
    secret: str
    previous_secret: str | None
    previous_secret_until: datetime | None
    timeout: float
    headers: dict[str, str] | None
    allow_private: bool
    retry_schedule: list[float] | None
    disabled_at: datetime | None
    disabled_reason: str | None
    created_at: datetime
    updated_at: datetime
    topics: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the dataclass's own would print the secrets
        return f"EndpointRow(name={self.name!r}, url={self.url!r})"


@dataclass(frozen=True, slots=True)
class AttemptRow:
    """One HTTP request of a delivery (the attempts table); `at` is naive UTC."""

    message_id: int
    endpoint: str
    attempt: int
    at: datetime
    status: int | None
    latency: float
    error: str | None
    response_body: str | None


_ENDPOINT_COLUMNS = (
    "name", "url", "secret", "previous_secret", "previous_secret_until", "timeout",
    "headers", "allow_private", "retry_schedule", "disabled_at", "disabled_reason",
    "created_at", "updated_at",
)  # fmt: skip


@contextmanager
def _secrets_hidden() -> Iterator[None]:
    """A failed statement that binds a secret is raised without its parameters, which
    SQLAlchemy's message would otherwise print (logs, the CLI's error line)."""
    try:
        yield
    except sa.exc.StatementError as e:
        e.hide_parameters = True
        raise


async def insert_endpoint(
    conn: AsyncConnection, tables: QueueTables, values: dict[str, Any], patterns: Sequence[str]
) -> bool:
    """Store a new endpoint and its topic patterns; False when the name is taken
    (the caller rolls back). The caller's transaction makes both one change."""
    e = tables.endpoints
    if await conn.scalar(sa.select(e.c.name).where(e.c.name == values["name"])) is not None:
        return False
    now = utc_now()
    try:
        with _secrets_hidden():
            await conn.execute(e.insert().values(created_at=now, updated_at=now, **values))
    except sa.exc.IntegrityError:
        return False  # added by another process since the read: its primary key
    await add_topics(conn, tables, values["name"], patterns)
    return True


async def add_topics(
    conn: AsyncConnection, tables: QueueTables, name: str, patterns: Sequence[str]
) -> int:
    """Subscribe endpoint `name` to topic `patterns` (those it has are kept); how many
    were new."""
    if not patterns:
        return 0
    t = tables.endpoint_topics
    rows = [
        {"pattern": pattern, "endpoint": name, "root": pattern_root(pattern)}
        for pattern in dict.fromkeys(patterns)
    ]
    result = await conn.execute(
        _insert_skipping_existing(conn, t).values(created_at=utc_now()), rows
    )
    return max(result.rowcount or 0, 0)


async def lock_endpoint(conn: AsyncConnection, tables: QueueTables, name: str) -> bool:
    """Whether endpoint `name` exists, its row locked until the caller's transaction
    ends: a removal waits for it, so no topic is added to an endpoint being removed."""
    e = tables.endpoints
    found = await conn.scalar(sa.select(e.c.name).where(e.c.name == name).with_for_update())
    return found is not None


async def update_endpoint(
    conn: AsyncConnection, tables: QueueTables, name: str, values: dict[str, Any]
) -> bool:
    """Change the given settings of endpoint `name` (no secret among them: set_secret);
    whether it exists."""
    if not await lock_endpoint(conn, tables, name):
        return False
    e = tables.endpoints
    await conn.execute(e.update().where(e.c.name == name).values(**values, updated_at=utc_now()))
    return True


async def remove_topic(conn: AsyncConnection, tables: QueueTables, name: str, pattern: str) -> bool:
    t = tables.endpoint_topics
    result = await conn.execute(t.delete().where(t.c.endpoint == name, t.c.pattern == pattern))
    return bool(result.rowcount)


async def endpoint_rows(
    conn: AsyncConnection, tables: QueueTables, names: Sequence[str] | None = None
) -> list[EndpointRow]:
    """The endpoints (only `names`, if given) by name, each with its patterns: two
    statements."""
    e, t = tables.endpoints, tables.endpoint_topics
    stmt = sa.select(*(e.c[c] for c in _ENDPOINT_COLUMNS)).order_by(e.c.name)
    topics_stmt = sa.select(t.c.endpoint, t.c.pattern).order_by(t.c.endpoint, t.c.pattern)
    if names is not None:
        if not names:
            return []
        stmt = stmt.where(e.c.name.in_(list(names)))
        topics_stmt = topics_stmt.where(t.c.endpoint.in_(list(names)))
    patterns: dict[str, list[str]] = {}
    for endpoint, pattern in await conn.execute(topics_stmt):
        patterns.setdefault(endpoint, []).append(pattern)
    return [
        EndpointRow(**row._mapping, topics=tuple(patterns.get(row.name, ())))
        for row in await conn.execute(stmt)
    ]


async def set_disabled(
    conn: AsyncConnection, tables: QueueTables, name: str, reason: str | None
) -> bool | None:
    """Disable endpoint `name` (`reason` set) or enable it (`reason` None); whether it
    changed, None when there is no such endpoint."""
    e = tables.endpoints
    current = (
        await conn.execute(sa.select(e.c.disabled_at).where(e.c.name == name).with_for_update())
    ).first()
    if current is None:
        return None
    disabling = reason is not None
    if (current.disabled_at is not None) == disabling:
        return False
    now = utc_now()
    await conn.execute(
        e.update()
        .where(e.c.name == name)
        .values(
            disabled_at=now if disabling else None,
            disabled_reason=reason,
            updated_at=now,
        )
    )
    return True


async def set_secret(
    conn: AsyncConnection, tables: QueueTables, name: str, secret: str, grace: timedelta
) -> bool:
    """Make `secret` endpoint `name`'s secret; the one before it stays valid for
    `grace`. Whether the endpoint exists."""
    e = tables.endpoints
    # read first: MySQL assigns SET columns left to right, so `previous_secret =
    # secret` beside `secret = :new` would copy the new one
    current = await conn.scalar(sa.select(e.c.secret).where(e.c.name == name).with_for_update())
    if current is None:
        return False
    keep = grace > timedelta(0)
    with _secrets_hidden():
        await conn.execute(
            e.update()
            .where(e.c.name == name)
            .values(
                previous_secret=current if keep else None,
                previous_secret_until=utc_now(grace.total_seconds()) if keep else None,
                secret=secret,
                updated_at=utc_now(),
            )
        )
    return True


async def delete_endpoint(conn: AsyncConnection, tables: QueueTables, name: str) -> int | None:
    """Delete endpoint `name`, its topics, its channel's control row and its waiting
    deliveries (those in flight are dead-lettered by the delivery, which finds no
    endpoint). How many deliveries went; None when there is no such endpoint."""
    e, t, c = tables.endpoints, tables.endpoint_topics, tables.controls
    if not (await conn.execute(e.delete().where(e.c.name == name))).rowcount:
        return None
    await conn.execute(t.delete().where(t.c.endpoint == name))
    await conn.execute(c.delete().where(c.c.queue == DELIVERY_QUEUE, c.c.channel == name))
    m = tables.message
    ids = list(
        (
            await conn.execute(
                sa.select(m.c.id)
                .where(
                    m.c.queue == DELIVERY_QUEUE,
                    m.c.channel == name,
                    m.c.state.in_(
                        [MessageState.PENDING, MessageState.RETRYABLE, MessageState.WAITING]
                    ),
                )
                .with_for_update(skip_locked=True)
            )
        ).scalars()
    )
    deleted = 0
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        for table in tables.live:  # the key rows first (MySQL)
            result = await conn.execute(table.delete().where(table.c.id.in_(chunk)))
        deleted += result.rowcount or 0
    return deleted


async def record_attempts(
    conn: AsyncConnection, tables: QueueTables, attempts: Sequence[AttemptRow]
) -> None:
    """Store the attempts of many deliveries: one INSERT."""
    if not attempts:
        return
    a = tables.attempts
    await conn.execute(
        a.insert(),
        [
            {
                "message_id": x.message_id,
                "endpoint": x.endpoint,
                "attempt": x.attempt,
                "at": x.at,
                "status": x.status,
                "latency": x.latency,
                "error": x.error,
                "response_body": x.response_body,
            }
            for x in attempts
        ],
    )


async def attempts_of(
    conn: AsyncConnection, tables: QueueTables, message_id: int, *, limit: int = 100
) -> list[AttemptRow]:
    """The latest `limit` attempts of one delivery, oldest first."""
    a = tables.attempts
    rows = await conn.execute(
        sa.select(
            a.c.message_id, a.c.endpoint, a.c.attempt, a.c.at, a.c.status, a.c.latency,
            a.c.error, a.c.response_body,
        )
        .where(a.c.message_id == message_id)
        .order_by(a.c.id.desc())
        .limit(limit)
    )  # fmt: skip
    return [AttemptRow(*row) for row in reversed(list(rows))]


__all__ = [
    "AttemptRow",
    "EndpointRow",
    "add_topics",
    "attempts_of",
    "delete_endpoint",
    "endpoint_rows",
    "insert_endpoint",
    "lock_endpoint",
    "record_attempts",
    "remove_topic",
    "set_disabled",
    "set_secret",
    "update_endpoint",
]
