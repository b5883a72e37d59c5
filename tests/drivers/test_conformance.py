"""One suite every driver must pass: the SQL contract behind the `Driver` interface,
the channel claim included."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import lifecycle
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.admin.channels import set_channel_paused
from faststream_sqla.channels.store import set_limits
from faststream_sqla.drivers import driver_for
from faststream_sqla.drivers.base import NewMessage, Outcome, StoredClaim
from faststream_sqla.message import ClaimedMessage
from faststream_sqla.schema import MAX_QUEUE_NAME_LENGTH, BreakerState, MessageState, QueueTables

from tests.conftest import on_servers
from tests.support.helpers import due_channel_breaker, rows


def new(queue: str = "q", *, delay: float = 0.0, at: datetime | None = None) -> NewMessage:
    return NewMessage(
        queue=queue, headers={"k": "v"}, headers_json='{"k": "v"}', payload=b"p",
        correlation_id="c", publish_at=at, publish_delay=delay,
    )


async def claim(engine, driver, queue: str, limit: int) -> list[ClaimedMessage]:
    """Claim through the driver and read the rows the way the fetch loop does, which
    also checks that each row carries CLAIMED_COLUMNS in order."""
    return await driver.claim(engine, queue, limit)


async def insert(engine, driver, *messages: NewMessage) -> list[int]:
    return await driver.insert_committed(engine, list(messages))


async def test_insert_returns_ids_in_order_and_stores_pending_rows(engine, tables, driver):
    ids = await insert(engine, driver, *(new() for _ in range(5)))
    assert ids == sorted(ids) and len(set(ids)) == 5
    stored = await rows(engine, tables.message)
    assert [r["id"] for r in stored] == ids
    assert {r["state"] for r in stored} == {MessageState.PENDING}
    assert stored[0]["headers"] == {"k": "v"} and stored[0]["payload"] == b"p"


async def test_claim_takes_ready_messages_oldest_first_up_to_the_limit(engine, tables, driver):
    later = await insert(engine, driver, new(delay=3600))
    first = await insert(engine, driver, *(new() for _ in range(3)))
    other = await insert(engine, driver, new("other"))
    claimed = await claim(engine, driver, "q", 2)
    assert [r.id for r in claimed] == first[:2]
    assert all(r.deliveries_count == 1 and r.acquired_at is not None for r in claimed)
    assert all(r.headers == {"k": "v"} and r.payload == b"p" for r in claimed)
    assert all(r.queue == "q" and r.correlation_id == "c" for r in claimed)
    assert all(r.created_at <= r.acquired_at and r.first_attempt_at is None for r in claimed)
    # the claim reports the acquired_at it stored: attempt times are measured from it
    stored = {r["id"]: r["acquired_at"] for r in await rows(engine, tables.message)}
    assert all(stored[r.id] == r.acquired_at for r in claimed)
    rest = await claim(engine, driver, "q", 10)
    assert [r.id for r in rest] == first[2:]  # not the delayed one, not other queues
    assert later[0] not in [r.id for r in rest] and other[0] not in [r.id for r in rest]


async def test_concurrent_claims_never_share_a_message(engine, driver):
    inserted = await insert(engine, driver, *(new() for _ in range(60)))
    batches = await asyncio.gather(*(claim(engine, driver, "q", 10) for _ in range(8)))
    ids = [r.id for batch in batches for r in batch]
    assert len(ids) == len(set(ids))  # never one message in two claims
    # Under a loaded host MariaDB's SKIP LOCKED has once returned short claims (30 of
    # 60 rows over eight claims); what they skipped is still there for the next claim.
    while rest := await claim(engine, driver, "q", 10):
        ids += [r.id for r in rest]
    assert sorted(ids) == inserted


async def test_outcomes_archive_requeue_and_are_fenced(engine, tables, driver):
    a, b, c = await insert(engine, driver, new(), new(), new())
    claimed = {r.id: r for r in await claim(engine, driver, "q", 3)}
    now = claimed[a].acquired_at
    outcomes = [
        Outcome(id=a, token=1, state=MessageState.COMPLETED, attempts_count=1,
                deliveries_count=1, first_attempt_at=now - timedelta(minutes=5),
                last_attempt_at=now),
        Outcome(id=b, token=1, state=MessageState.RETRYABLE, attempts_count=1,
                deliveries_count=1, first_attempt_at=now, last_attempt_at=now,
                next_attempt_at=now + timedelta(hours=1), last_error="boom"),
        Outcome(id=c, token=7, state=MessageState.FAILED, attempts_count=1,  # stale token
                deliveries_count=7),
    ]
    assert await driver.write_outcomes(engine, outcomes) == 2
    (archived,) = await rows(engine, tables.archive)
    assert (archived["id"], archived["state"]) == (a, MessageState.COMPLETED)
    # times round-trip to the microsecond, whatever form a driver sends them in
    assert archived["first_attempt_at"] == now - timedelta(minutes=5)
    assert archived["last_attempt_at"] == now
    by_id = {r["id"]: r for r in await rows(engine, tables.message)}
    assert by_id[b]["state"] == MessageState.RETRYABLE and by_id[b]["last_error"] == "boom"
    assert by_id[b]["acquired_at"] is None
    assert by_id[b]["next_attempt_at"] == now + timedelta(hours=1)
    assert (by_id[b]["first_attempt_at"], by_id[b]["attempts_count"]) == (now, 1)
    assert by_id[c]["state"] == MessageState.PROCESSING  # the stale outcome changed nothing


async def test_a_claim_given_back_unstarted_never_shares_a_token(engine, tables, driver):
    """Claim, give back unstarted (a graceful stop), claim again elsewhere: the first
    claim's late outcome and renewal change nothing; the second claim's outcome lands."""
    await insert(engine, driver, new())
    (first,) = await claim(engine, driver, "q", 1)
    assert await driver.write_outcomes(engine, [lifecycle.released(first, started=False)]) == 1
    (second,) = await claim(engine, driver, "q", 1)
    assert second.deliveries_count == first.deliveries_count == 1  # not counted twice
    assert second.token > first.token
    late = lifecycle.completed(first, first.acquired_at)
    assert await driver.write_outcomes(engine, [late]) == 0
    assert await driver.extend_leases(engine, [(first.id, first.token)]) == 0
    (row,) = await rows(engine, tables.message)
    assert (row["state"], row["claims_count"]) == (MessageState.PROCESSING, second.token)
    assert await rows(engine, tables.archive) == []
    done = lifecycle.completed(second, second.acquired_at)
    assert await driver.write_outcomes(engine, [done]) == 1
    (archived,) = await rows(engine, tables.archive)
    assert (archived["state"], archived["claims_count"]) == (MessageState.COMPLETED, 2)


async def test_leases_extend_only_current_claims(engine, tables, driver):
    a, b = await insert(engine, driver, new(), new())
    await driver.claim(engine, "q", 2)
    old = {r["id"]: r["acquired_at"] for r in await rows(engine, tables.message)}
    assert await driver.extend_leases(engine, [(a, 1), (b, 5)]) == 1
    after = {r["id"]: r["acquired_at"] for r in await rows(engine, tables.message)}
    assert after[a] >= old[a] and after[b] == old[b]


async def test_stored_claims_give_each_rows_token_and_whether_it_is_processing(
    engine, tables, driver
):
    a, b, c = await insert(engine, driver, new(), new(), new())
    first, second = await claim(engine, driver, "q", 2)
    done = lifecycle.completed(second, second.acquired_at)
    assert await driver.write_outcomes(engine, [done]) == 1
    absent = list(range(10**9, 10**9 + 700))  # more ids than one statement takes
    stored = await driver.stored_claims(engine, [*absent, a, b, c])
    assert stored == {a: StoredClaim(first.token, True), c: StoredClaim(0, False)}


async def test_release_stuck_only_touches_old_claims_of_given_queues(engine, tables, driver):
    await insert(engine, driver, new("q"), new("other"))
    await driver.claim(engine, "q", 1)
    await driver.claim(engine, "other", 1)
    assert await driver.release_stuck(engine, ["q"], 3600) == 0  # too recent
    assert await driver.release_stuck(engine, ["q"], 0) == 1
    states = {r["queue"]: r["state"] for r in await rows(engine, tables.message)}
    assert states == {"q": MessageState.PENDING, "other": MessageState.PROCESSING}


@pytest.mark.parametrize("held_count", [1, 5000])
async def test_release_stuck_leaves_what_the_caller_holds(engine, tables, driver, held_count):
    mine, theirs = await insert(engine, driver, new(), new())
    await driver.claim(engine, "q", 2)
    # thousands of held ids still travel as one parameter
    held = [mine, *range(10**9, 10**9 + held_count - 1)]
    assert await driver.release_stuck(engine, ["q"], 0, held) == 1
    states = {r["id"]: r["state"] for r in await rows(engine, tables.message)}
    assert states == {mine: MessageState.PROCESSING, theirs: MessageState.PENDING}


async def test_counting_a_queue_stops_at_the_bound(engine, tables, driver):
    await insert(engine, driver, *(new() for _ in range(10)), new("other"))
    await driver.claim(engine, "q", 4)  # 4 in flight, 6 waiting
    async with engine.connect() as conn:
        assert await driver.count_active(conn, "q", at_most=100) == 10
        assert 3 <= await driver.count_active(conn, "q", at_most=3) <= 6  # per index
        assert await driver.count_active(conn, "none", at_most=100) == 0


async def test_explicit_publish_time_is_stored_exactly(engine, tables, driver):
    at = datetime(2031, 5, 6, 7, 8, 9, 123456)
    (i,) = await insert(engine, driver, new(at=at))
    (row,) = await rows(engine, tables.message, tables.message.c.id == i)
    assert row["next_attempt_at"] == at
    assert row["created_at"] < at


EVERY_OPTION = {
    "expires_at": datetime(2031, 5, 6, 7, 8, 9, 123000),
    "priority": 7,
    "ordering_key": "customer-1",
    "idempotency_key": "order-1",
    "channel": "tenant-1",
    "redriven_from": 12345,
}


@pytest.mark.parametrize("batched", [False, True], ids=["one_by_one", "in_one_batch"])
async def test_every_option_of_a_message_is_stored_as_given_and_default_when_unset(
    engine, tables, driver, batched
):
    """A single publish and a batch take different routes to the same columns: the two
    messages differ only in their options, so a batch is one run of rows."""
    given, plain = dataclasses.replace(new(), **EVERY_OPTION), new()
    if batched:
        given_id, plain_id = await insert(engine, driver, given, plain)
    else:
        (given_id,), (plain_id,) = [await insert(engine, driver, m) for m in (given, plain)]
    stored = {r["id"]: r for r in await rows(engine, tables.message)}
    assert {name: stored[given_id][name] for name in EVERY_OPTION} == EVERY_OPTION
    assert {name: stored[plain_id][name] for name in EVERY_OPTION} == {
        **dict.fromkeys(EVERY_OPTION), "priority": 0
    }


async def test_outbox_insert_joins_the_callers_transaction(engine, tables, driver):
    async with engine.connect() as conn:
        await driver.insert_messages(conn, [new()])
        await conn.rollback()
    assert await rows(engine, tables.message) == []


@pytest.mark.databases("mysql")
@pytest.mark.parametrize(("returning", "consecutive"), [(False, True), (False, False)])
async def test_mysql8_insert_paths_without_returning(server_databases, returning, consecutive):
    """MySQL 8 has no INSERT ... RETURNING; its two id strategies run here on MariaDB."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from faststream_sqla.schema import QueueTables

    engine = create_async_engine(server_databases["mysql"])
    tables = QueueTables()
    d = driver_for(engine, tables)
    await d.prepare(engine)
    d.insert_returning, d.consecutive_ids = returning, consecutive
    try:
        async with engine.begin() as conn:
            await conn.execute(tables.message.delete())
        ids = await insert(engine, d, *(new("mysql8") for _ in range(4)))
        stored = await rows(engine, tables.message, tables.message.c.queue == "mysql8")
        assert ids == [r["id"] for r in stored]
    finally:
        async with engine.begin() as conn:
            await conn.execute(tables.message.delete())
        await engine.dispose()


async def test_a_large_outcome_batch_is_written_whole(engine, tables, driver):
    """More outcomes than one statement takes on SQLite (1,024 archived rows per
    statement, then power-of-two sizes); the server drivers send any number in one
    statement."""
    ids = await insert(engine, driver, *(new() for _ in range(4100)))
    claimed = await claim(engine, driver, "q", 5000)
    assert len(claimed) == 4100
    outcomes = [
        Outcome(id=r.id, token=r.token, state=MessageState.COMPLETED, attempts_count=1,
                deliveries_count=r.deliveries_count, first_attempt_at=r.acquired_at,
                last_attempt_at=r.acquired_at)
        for r in claimed
    ]
    assert await driver.write_outcomes(engine, outcomes) == 4100
    assert sorted(r["id"] for r in await rows(engine, tables.archive)) == ids
    assert await rows(engine, tables.message) == []


@pytest.mark.parametrize("server", on_servers())
async def test_a_batch_of_mixed_rows_is_stored_all_or_nothing(server, server_databases):
    """Rows of different queues may take several statements; they commit together.
    (The failing row is too long for the queue column, which SQLite does not check.)"""
    engine = create_async_engine(server_databases[server])
    tables = QueueTables()
    driver = driver_for(engine, tables)
    await driver.prepare(engine)
    mine = tables.message.c.queue.in_(["mixed-a", "mixed-b"])
    try:
        with pytest.raises(sa.exc.DBAPIError):
            await driver.insert_committed(
                engine,
                [new("mixed-a"), new("mixed-a"), new("x" * (MAX_QUEUE_NAME_LENGTH + 1))],
            )
        assert await rows(engine, tables.message, mine) == []
        ids = await driver.insert_committed(
            engine, [new("mixed-a"), new("mixed-b"), new("mixed-a")]
        )
        assert [r["id"] for r in await rows(engine, tables.message, mine)] == ids
    finally:
        async with engine.begin() as conn:
            await conn.execute(tables.message.delete().where(mine))
        await engine.dispose()


@pytest.mark.databases("mysql")
async def test_mysql_own_transactions_read_committed_and_leave_the_session_alone(
    server_databases,
):
    """Claims, outcome writes and lease renewals run at READ COMMITTED (no gap locks
    against publishers), set for their own transaction only: the pooled connection's
    session keeps the server's default (REPEATABLE READ) for whoever uses it next."""
    from sqlalchemy.ext.asyncio import create_async_engine

    from faststream_sqla.schema import QueueTables

    tables = QueueTables()
    engine = create_async_engine(server_databases["mysql"], pool_size=1, max_overflow=0)
    other = create_async_engine(server_databases["mysql"])
    d = driver_for(engine, tables)
    count = sa.select(sa.func.count()).select_from(tables.message).where(
        tables.message.c.queue == "isolation"
    )

    async def sees_a_commit_made_meanwhile(counted) -> bool:
        before = await counted()
        await insert(other, d, new("isolation"))  # committed by another connection
        return await counted() > before

    try:
        # the broker's own transactions run on the driver (drivers/mysql/_asyncmy.py)
        async with d._transaction(engine) as transaction:
            cursor = transaction.cursor

            async def on_driver() -> int:
                await cursor.execute(
                    "SELECT count(*) FROM message WHERE queue = %s", ("isolation",)
                )
                return (await cursor.fetchall())[0][0]

            assert await sees_a_commit_made_meanwhile(on_driver)  # READ COMMITTED
        async with engine.begin() as conn:  # the same pooled connection, next user

            async def through_sqlalchemy() -> int:
                return (await conn.execute(count)).scalar_one()

            assert not await sees_a_commit_made_meanwhile(through_sqlalchemy)  # REPEATABLE READ
    finally:
        async with other.begin() as conn:
            await conn.execute(tables.message.delete().where(tables.message.c.queue == "isolation"))
        await engine.dispose()
        await other.dispose()


# -- the channel claim (channels.claim: the read, the plan, the version-checked write) --


def channelled(channel: str | None, n: int = 1) -> list[NewMessage]:
    messages = []
    for _ in range(n):
        message = new("work")
        message.channel = channel
        messages.append(message)
    return messages


async def claim_channels(engine, driver, limit: int, **kwargs) -> list[ClaimedMessage]:
    return await claim_channelled(driver, engine, "work", limit, **kwargs)


async def test_a_channel_claim_marks_what_it_returns_as_a_plain_claim_does(
    engine, tables, driver
):
    await set_limits(driver, engine, "work", "a", max_concurrency=5)
    ids = await insert(engine, driver, *channelled("a", 2))
    claimed = await claim_channels(engine, driver, 10)
    assert sorted(m.id for m in claimed) == ids
    for m in claimed:
        assert (m.queue, m.channel, m.deliveries_count, m.claims_count) == ("work", "a", 1, 1)
        assert m.acquired_at is not None
    stored = {r["id"]: r for r in await rows(engine, tables.message)}
    assert {stored[i]["state"] for i in ids} == {MessageState.PROCESSING}


async def test_a_channel_claim_keeps_each_channels_limit_and_gives_turns(engine, driver):
    await set_limits(driver, engine, "work", channel_max_concurrency=2)
    await insert(engine, driver, *channelled("a", 5), *channelled("b", 5), *channelled(None, 5))
    first = await claim_channels(engine, driver, 3)
    # one each in turn: a, b, and the messages without a channel
    assert sorted(m.channel or "" for m in first) == ["", "a", "b"]
    rest = await claim_channels(engine, driver, 20)
    taken = [m.channel for m in first + rest]
    assert taken.count("a") == 2 and taken.count("b") == 2  # at their limit
    assert taken.count(None) == 5  # no limit of their own


async def test_a_paused_channel_and_one_out_of_rate_are_passed_over(engine, driver):
    await set_limits(driver, engine, "work", "slow", rate="2/min")
    await insert(
        engine, driver, *channelled("held", 3), *channelled("slow", 5), *channelled("free", 3)
    )
    await set_channel_paused(driver, engine, "work", "held", True)
    taken = [m.channel for m in await claim_channels(engine, driver, 20)]
    assert sorted(taken) == ["free"] * 3 + ["slow"] * 2


async def test_concurrent_channel_claims_share_no_message_and_keep_the_limit(engine, driver):
    await set_limits(driver, engine, "work", channel_max_concurrency=3)
    await insert(engine, driver, *(m for c in "abcd" for m in channelled(c, 6)))
    claims = await asyncio.gather(*(claim_channels(engine, driver, 4) for _ in range(6)))
    taken = [m for claimed in claims for m in claimed]
    assert len({m.id for m in taken}) == len(taken)
    for channel in "abcd":
        assert sum(1 for m in taken if m.channel == channel) <= 3


async def test_a_due_channel_breaker_lets_exactly_one_probe_through(engine, tables, driver):
    await due_channel_breaker(engine, tables, "work", "down", BreakerState.OPEN, failures=3)
    await set_limits(driver, engine, "work", "down", max_concurrency=5)
    await insert(engine, driver, *channelled("down", 3))
    first = await claim_channels(engine, driver, 10, channel_breakers=True)
    assert len(first) == 1  # the probe
    assert await claim_channels(engine, driver, 10, channel_breakers=True) == []
    c = tables.controls
    async with engine.connect() as conn:
        state = await conn.scalar(
            sa.select(c.c.breaker_state).where(c.c.queue == "work", c.c.channel == "down")
        )
    assert state == BreakerState.HALF_OPEN.value


async def test_a_server_that_replicates_nothing_is_0_behind_and_sqlite_cannot_tell(
    engine, driver, dialect_name
):
    async with engine.connect() as conn:
        lag = await driver.replica_lag(conn)
    assert lag == (None if dialect_name == "sqlite" else 0.0)
