"""Pieces of the claim statement shared by the drivers that build it from Core."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from faststream_sqla.clock import utc_now
from faststream_sqla.schema import CLAIMED_COLUMNS, PRIORITIES, MessageState, QueueTables


def state_literal(state: MessageState) -> sa.ColumnElement[str]:
    """A state as a literal, not a bound parameter: PostgreSQL and SQLite only use a
    partial index when the query's predicate visibly matches the index's."""
    return sa.literal_column(f"'{state.value}'")


def ready_predicate(m: sa.Table) -> sa.ColumnElement[bool]:
    return m.c.state.in_(
        [state_literal(MessageState.PENDING), state_literal(MessageState.RETRYABLE)]
    )


def queues_with_due_messages(tables: QueueTables, queues: Sequence[str]) -> sa.Select:
    """Which of `queues` hold a message the plain claim could take now: waiting, due,
    of no channel (its ordering key aside: one held back by its key counts). Per queue
    one probe of the claim index over the priorities, ending at its first row. A
    wake-up watcher runs it once per `max_fetch_interval` for the whole process, in
    place of every idle subscriber's claim (drivers/watch.py)."""
    m = tables.message
    if "ready_at" in m.c:  # MySQL's tables: see ready_ids
        due = [m.c.ready_at <= utc_now()]
    else:
        due = [ready_predicate(m), m.c.channel.is_(None), m.c.next_attempt_at <= utc_now()]
    priorities = [sa.literal(level, sa.Integer()) for level in PRIORITIES]
    parts = [
        sa.select(sa.literal(queue, sa.String()).label("queue")).where(
            sa.exists().where(
                m.c.queue == sa.literal(queue, sa.String()), m.c.priority.in_(priorities), *due
            )
        )
        for queue in queues
    ]
    if len(parts) == 1:
        return parts[0]
    return sa.select(sa.union_all(*parts).subquery().c.queue)


#: the parameters `ready_ids` binds, given on every claim
CLAIM_PARAMETERS = ("claim_queue", "claim_limit")


def claim_limit() -> sa.BindParameter[int]:
    return sa.bindparam("claim_limit", type_=sa.Integer())


def ready_ids(
    tables: QueueTables, priority: sa.ColumnElement[int], *extra: sa.ColumnElement
) -> sa.Select:
    """Ids (and `extra` columns) of one queue's ready messages of one `priority`, oldest
    first, up to :claim_limit. Each driver takes the priorities highest first
    (`schema.PRIORITIES`) and stops at the limit.

    Eligibility and ordering live here, so later terms (paused queues, rate limits)
    are added in one place for every driver. One range of the claim index per
    priority: with priority in the index but not pinned, a claim would walk every not
    yet due message of the higher priorities before reaching a due one.
    """
    m = tables.message
    if "ready_at" in m.c:
        # MySQL's tables: ready_at is next_attempt_at while the message may be claimed
        # and far in the future otherwise (schema.READY_AT_SQL); its index is the
        # claim's order.
        due = m.c.ready_at
        eligible: list[sa.ColumnElement[bool]] = []
    else:
        due = m.c.next_attempt_at
        # messages of channels are the channel claim's (faststream_sqla.channels); the
        # claim index leaves them out, and the planner must see that it may use it
        eligible = [ready_predicate(m), m.c.channel.is_(None)]
    return (
        sa.select(m.c.id, *extra)
        .where(
            m.c.queue == sa.bindparam("claim_queue"),
            m.c.priority == priority,
            *eligible,
            due <= utc_now(),
            first_of_its_key(tables),
        )
        .order_by(due, m.c.id)
        .limit(claim_limit())
    )


@dataclass(frozen=True)
class KeyedMessages:
    """Where a statement finds messages by ordering or idempotency key: `keys` has id,
    queue, ordering_key and idempotency_key under the key indexes, `message` is the
    message row itself (the same alias where the message table holds the indexes), and
    `source` is what to select from."""

    source: sa.FromClause
    keys: sa.FromClause
    message: sa.FromClause


def keyed_messages(tables: QueueTables, name: str = "k") -> KeyedMessages:
    if tables.keys is None:
        m = tables.message.alias(name)
        return KeyedMessages(m, m, m)
    k = tables.keys.alias(name)
    # Joined to its message: only a key whose message is still there counts, so a
    # message deleted by hand without its key row cannot hold its key for good.
    m = tables.message.alias(f"{name}_message")
    return KeyedMessages(k.join(m, m.c.id == k.c.id), k, m)


def earlier_of_its_key(tables: QueueTables) -> sa.Exists:
    """An earlier message (lower id) of the message row's ordering key is still in the
    table (waiting, in flight or retrying), read without a lock: a locked one still
    counts."""
    m = tables.message
    earlier = keyed_messages(tables, "earlier")
    blocked: sa.Select[Any] = (
        sa.select(sa.literal_column("1"))
        .select_from(earlier.source)
        .where(
            earlier.keys.c.queue == m.c.queue,
            earlier.keys.c.ordering_key == m.c.ordering_key,
            earlier.keys.c.id < m.c.id,
        )
    )
    if tables.keys is not None:
        # MariaDB judged the queue's prefix of an index the better way in: a walk of
        # the queue's every row per keyed candidate.
        blocked = blocked.with_hint(earlier.keys, f"FORCE INDEX (ix_{m.name}_ordering)")
    return blocked.exists()


def first_of_its_key(tables: QueueTables) -> sa.ColumnElement[bool]:
    """The message has no ordering key, or no earlier message of its key is still in
    the table. Settled messages leave the table, so the next one of a key becomes
    claimable when the one before it settles, and two of one key are never claimed
    together."""
    m = tables.message
    return sa.or_(m.c.ordering_key.is_(None), ~earlier_of_its_key(tables))


def priority_literal(level: int) -> sa.ColumnElement[int]:
    # a literal, not a parameter: the eleven branches are one statement text
    return sa.literal_column(str(int(level)))


def claimed_columns(m: sa.Table, *, headers_as_text: bool = False) -> list[sa.ColumnElement]:
    """The columns a claim returns, in CLAIMED_COLUMNS order, untyped on purpose: the
    drivers already return datetimes and bytes, and skipping SQLAlchemy's per-value
    result processing is most of a claim's client-side cost. `headers_as_text` returns
    the JSON as text where the driver would decode it itself, so the parser's cache of
    decoded headers can do it (`drivers.claimed_rows` finishes the job)."""
    columns: list[sa.ColumnElement[Any]] = []
    for name in CLAIMED_COLUMNS:
        column: sa.ColumnElement = m.c[name]
        if name == "headers" and headers_as_text:
            column = sa.cast(column, sa.Text())
        columns.append(sa.type_coerce(column, sa.types.NullType()).label(name))
    return columns
