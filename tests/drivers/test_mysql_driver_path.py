"""MySQL/MariaDB run the broker's own transactions on the pool's asyncmy connection
(`drivers/mysql/_asyncmy.py`): what that route must keep from SQLAlchemy's, and the round
trip it saves."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.store import set_limits
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import PRIORITIES, MessageState

from tests.conftest import on_servers
from tests.support.helpers import (
    claim_after_losing_the_connection,
    one_connection_engine,
    plain_message,
    prepared_driver,
    wait_until,
)


@pytest.fixture
async def my_engine(server_databases):
    async with one_connection_engine(server_databases["mysql"]) as engine:
        yield engine


@pytest.mark.databases("mysql")
async def test_a_committed_transaction_is_checked_in_without_a_rollback(my_engine):
    driver = await prepared_driver(my_engine)
    resets: list[bool] = []

    @sa.event.listens_for(my_engine.sync_engine.pool, "reset")
    def _reset(_dbapi_connection, _record, state) -> None:
        resets.append(state.transaction_was_reset)

    (message_id,) = await driver.insert_committed(my_engine, [plain_message()])
    assert resets == [True]  # already reset: no ROLLBACK sent
    resets.clear()
    with pytest.raises(sa.exc.ProgrammingError) as missing:
        async with driver._transaction(my_engine) as transaction:
            cursor = transaction.cursor
            await cursor.execute("SELECT * FROM no_such_table", ())
    assert resets == [True]  # after a failure, rolled back before it went back
    assert missing.value.orig.args[0] == 1146 and not missing.value.connection_invalidated
    with pytest.raises(sa.exc.IntegrityError):
        async with driver._transaction(my_engine) as transaction:
            cursor = transaction.cursor
            await cursor.execute(  # the same id again: a duplicate key
                "INSERT INTO message (id, queue, payload, state, attempts_count, "
                "deliveries_count, created_at, next_attempt_at) VALUES (%s, 'q', 'p', "
                "'PENDING', 0, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
                (message_id,),
            )
    rows = await driver.claim(my_engine, "q", 10)  # the connection is still good
    assert [m.id for m in rows] == [message_id]


@pytest.mark.databases("mysql")
async def test_a_killed_connection_is_dropped_and_the_retry_gets_a_fresh_one(my_engine):
    driver = await prepared_driver(my_engine)
    await driver.insert_committed(my_engine, [plain_message()])
    async with driver._transaction(my_engine) as transaction:  # the one pooled connection
        cursor = transaction.cursor
        await cursor.execute("SELECT CONNECTION_ID()", ())
        doomed = (await cursor.fetchall())[0][0]
    admin = create_async_engine(my_engine.url.render_as_string(hide_password=False))
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f"KILL CONNECTION {int(doomed)}")
    await admin.dispose()

    assert len(await claim_after_losing_the_connection(driver, my_engine, "q")) == 1


@pytest.mark.databases("mysql")
async def test_claim_and_release_stuck_each_read_their_own_range_of_the_ready_index(my_engine):
    """MySQL has no partial indexes: ready_at is the last DATETIME while a message is in
    flight, so the claim's range (ready_at up to now) holds no in-flight row to walk and
    lock, and release-stuck reads that one key (only in-flight rows), not the backlog."""
    from faststream_sqla.drivers._compiled import DriverStatement

    driver = await prepared_driver(my_engine)
    # A backlog well above the rows in flight, as in a busy queue: with 2,000 rows and
    # 300 in flight MariaDB sometimes judged a walk of the primary key as cheap.
    await driver.insert_committed(my_engine, [plain_message() for _ in range(20000)])
    in_flight = await driver.claim(my_engine, "q", 300)
    claim = DriverStatement(
        driver._lock_ready, my_engine.dialect, per_call=("claim_queue", "claim_limit")
    )
    statements: list[tuple[str, object]] = []

    @sa.event.listens_for(my_engine.sync_engine, "before_cursor_execute")
    def _capture(_conn, _cursor, statement, parameters, _context, _executemany) -> None:
        statements.append((statement, parameters))

    assert await driver.release_stuck(my_engine, ["q"], 300.0) == 0  # none is that old
    ((release_sql, release_args),) = [s for s in statements if s[0].startswith("UPDATE")]
    async with driver._transaction(my_engine) as transaction:
        cursor = transaction.cursor
        await cursor.execute("ANALYZE TABLE message", ())
        await cursor.fetchall()
        await cursor.execute(
            f"EXPLAIN {claim.sql}", claim.arguments({"claim_queue": "q", "claim_limit": 100})
        )
        claim_plan = await cursor.fetchall()
        await cursor.execute(f"EXPLAIN {release_sql}", release_args)
        release_plan = await cursor.fetchall()
    # EXPLAIN columns: id, select_type, table, type, possible_keys, key, ...
    # one range per priority, and the ordering-key check by its own index
    used = {(row[2], row[5]) for row in claim_plan if row[2] in ("message", "earlier")}
    assert used == {("message", "ix_message_ready"), ("earlier", "ix_message_ordering")}
    assert sum(row[2] == "message" for row in claim_plan) == len(PRIORITIES)
    assert [row[5] for row in release_plan] == ["ix_message_ready"]
    assert release_plan[0][3] in ("ref", "range")  # not a scan of the table or index

    # and the rows the claim returns are the next ready ones, not in-flight ones
    taken = {m.id for m in in_flight}
    nxt = await driver.claim(my_engine, "q", 100)
    assert len(nxt) == 100 and not taken & {m.id for m in nxt}
    assert min(m.id for m in nxt) > max(taken)
    async with my_engine.begin() as conn:
        ready_at = await conn.scalar(
            sa.text("SELECT COUNT(*) FROM message WHERE ready_at = '9999-12-31 23:59:59'")
        )
    assert ready_at == 400  # both claims' rows, and only those
    assert await driver.release_stuck(my_engine, ["q"], 0.0) == 400  # found by that key


@pytest.mark.databases("mysql")
async def test_mysql_claim_round_trips_counts_the_statements_a_claim_sends(my_engine):
    """The server's own count of statements on the one connection, around a claim."""
    driver = await prepared_driver(my_engine)
    await driver.insert_committed(my_engine, [plain_message() for _ in range(3)])

    async def statements_so_far() -> int:
        async with my_engine.connect() as conn:
            result = await conn.exec_driver_sql(
                "SELECT VARIABLE_VALUE FROM information_schema.SESSION_STATUS"
                " WHERE VARIABLE_NAME = 'QUESTIONS'"
            )
            return int(result.scalar_one())

    first, second = await statements_so_far(), await statements_so_far()
    reading = second - first  # what one reading itself adds
    before = await statements_so_far()
    assert len(await driver.claim(my_engine, "q", 10)) == 3
    after = await statements_so_far()
    assert after - before - reading == driver.claim_round_trips == 4


@pytest.mark.parametrize("dialect_name", on_servers("mysql"))
async def test_a_channel_claim_reads_back_what_it_marked_when_another_took_some(
    database_url, engine, driver, tables
):
    """MariaDB's channel claim takes (a plain read) and then marks, with no UPDATE ...
    RETURNING: when a plain claim takes one of the taken messages without a channel in
    between, the marking leaves it alone and the claim returns what it did mark."""
    await set_limits(driver, engine, "work", channel_max_concurrency=5)
    async with SqlaBroker(database_url) as broker:
        await broker.publish_batch("a1", "a2", queue="work", channel="a")
        await broker.publish("p1", queue="work")
    m = tables.message

    async def marking_waits() -> bool:
        async with engine.connect() as conn:
            running = await conn.exec_driver_sql(
                "SELECT count(*) FROM information_schema.processlist "
                "WHERE info LIKE 'UPDATE message_controls AS c STRAIGHT_JOIN message%%'"
            )
            return bool(running.scalar())

    async with engine.connect() as conn:
        p1 = await conn.scalar(sa.select(m.c.id).where(m.c.channel.is_(None)))
    async with engine.connect() as other:
        # another claimer holds the message without a channel (its row alone, by
        # primary key): the marking, which the take's plain read did not stop, waits
        await other.execute(sa.select(m.c.id).where(m.c.id == p1).with_for_update())
        claim = asyncio.create_task(claim_channelled(driver, engine, "work", 10))
        await wait_until(marking_waits)
        await other.execute(
            sa.update(m)
            .where(m.c.id == p1)
            .values(state=MessageState.PROCESSING, acquired_at=utc_now())
        )
        await other.commit()
        claimed = await claim
    assert sorted(m.payload for m in claimed) == [b"a1", b"a2"]
    assert {(m.deliveries_count, m.claims_count) for m in claimed} == {(1, 1)}  # deliveries, claims counted
    async with engine.connect() as conn:
        states = dict(
            (await conn.execute(sa.select(m.c.payload, m.c.deliveries_count))).all()
        )
    assert states == {b"a1": 1, b"a2": 1, b"p1": 0}  # p1 is the other claimer's
