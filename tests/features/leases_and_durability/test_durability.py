"""Nothing is lost: graceful stop, stuck claims, the outbox, bad input, lost connections."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

from faststream_sqla import MessageState, SqlaBroker, SqlaMessage
from faststream_sqla.clock import utc_now
from faststream_sqla.exceptions import (
    DatabaseUnreachableError,
    InvalidOptionError,
    InvalidQueueNameError,
    MessageSerializationError,
    SchemaMissingError,
    SchemaOutdatedError,
)
from faststream_sqla.schema import QueueTables
from tests.conftest import on_servers
from tests.support.helpers import (
    FAST,
    Recorder,
    handle_one,
    recording,
    rows,
    threads_finish_before_the_loop_closes,
    wait_until,
)


async def test_graceful_stop_requeues_prefetched_and_finishes_running(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    started, release = Recorder(), asyncio.Event()

    subscriber = broker.subscriber("q", max_workers=1, fetch_batch_size=10, **FAST)

    @subscriber
    async def handle(n: int) -> None:
        started.record(n)
        await release.wait()

    async with broker:
        ids = await broker.publish_batch(*range(5), queue="q")
        await broker.start()
        await started.wait_for(1)  # one running, four waiting in the prefetch buffer
        stopping = asyncio.create_task(broker.stop())

        async def stop_has_begun() -> bool:
            return not subscriber.running  # workers take nothing new from here on

        await wait_until(stop_has_begun, interval=0.001)
        release.set()
        await stopping

    assert started.calls == [0]
    (done,) = await rows(engine, tables.archive)
    assert (done["id"], done["state"], done["attempts_count"]) == (ids[0], MessageState.COMPLETED, 1)
    back = await rows(engine, tables.message)
    assert [r["id"] for r in back] == ids[1:]
    for row in back:
        assert row["state"] == MessageState.PENDING
        assert row["deliveries_count"] == 0  # never reached a handler: not a delivery
        assert row["attempts_count"] == 0
        assert row["acquired_at"] is None


async def test_handler_cut_off_by_graceful_timeout_spends_no_attempt(database_url, engine, tables):
    broker = SqlaBroker(database_url, graceful_timeout=0.1)
    started = Recorder()

    @broker.subscriber("q", **FAST)
    async def handle(body: str) -> None:
        started.record(body)
        await asyncio.Event().wait()  # never finishes on its own

    await handle_one(broker, started, "slow")

    (row,) = await rows(engine, tables.message)
    assert row["state"] == MessageState.PENDING
    assert row["attempts_count"] == 0
    assert row["deliveries_count"] == 1
    assert await rows(engine, tables.archive) == []


async def _insert_stuck(engine, tables, queue: str) -> int:
    async with engine.begin() as conn:
        result = await conn.execute(
            tables.message.insert().values(
                queue=queue, headers={}, payload=b'"stuck"', state=MessageState.PROCESSING,
                attempts_count=0, deliveries_count=1, created_at=utc_now(-3600),
                next_attempt_at=utc_now(-3600), acquired_at=utc_now(-3600),
            )
        )
        return result.inserted_primary_key[0]


async def test_release_stuck_redelivers_only_own_queues(make_broker, engine, tables):
    mine = await _insert_stuck(engine, tables, "q")
    other = await _insert_stuck(engine, tables, "other")
    broker = make_broker()
    got = recording(
        broker, "q", release_stuck_timeout=1, release_stuck_interval=0.05,
        record=lambda body, msg: (msg.message_id, msg.deliveries_count),
    )

    async with broker:
        await broker.start()
        await got.wait_for(1)

    assert got.calls == [(mine, 2)]
    (untouched,) = await rows(engine, tables.message)
    assert untouched["id"] == other
    assert untouched["state"] == MessageState.PROCESSING


# -- transactional outbox -------------------------------------------------------------

@pytest.mark.parametrize("via", ["connection", "session"])
async def test_outbox_publish_exists_only_if_transaction_commits(
    make_broker, engine, tables, business_table, via
):
    broker = make_broker()
    got = recording(broker, "q")

    async def write(order_id: int, body: str, *, commit: bool) -> None:
        if via == "connection":
            async with engine.connect() as conn:
                await conn.execute(business_table.insert().values(id=order_id))
                await broker.publish(body, queue="q", connection=conn)
                await (conn.commit() if commit else conn.rollback())
        else:
            async with AsyncSession(engine) as session:
                await session.execute(business_table.insert().values(id=order_id))
                await broker.publish(body, queue="q", connection=session)
                await (session.commit() if commit else session.rollback())

    async with broker:
        await broker.start()
        await write(1, "rolled back", commit=False)
        await write(2, "committed", commit=True)
        await got.wait_for(1)
        await broker.publish("marker", queue="q")  # anything earlier would arrive first
        await got.wait_for(2)

    assert got.calls == ["committed", "marker"]
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(business_table.c.id))).scalars().all() == [2]
    assert len(await rows(engine, tables.archive)) == 2


async def test_outbox_message_is_not_delivered_before_commit(make_broker, engine, business_table):
    broker = make_broker()
    got = recording(broker, "q")

    async with broker:
        await broker.start()
        async with engine.connect() as conn:
            await broker.publish("inside", queue="q", connection=conn)
            # While the transaction is open, a message published and committed after it
            # is delivered, and the uncommitted one is not.
            if engine.dialect.name != "sqlite":  # SQLite allows one writer at a time
                await broker.publish("outside", queue="q")
                await got.wait_for(1)
                assert got.calls == ["outside"]
            # counted before the commit: the message may be handled before commit() returns
            expected = len(got.calls) + 1
            await conn.commit()
        await got.wait_for(expected)
    assert got.calls[-1] == "inside"


# -- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"queue": ""}, InvalidQueueNameError),
        ({"queue": "q" * 256}, InvalidQueueNameError),
        ({"queue": "q", "next_attempt_at": datetime(2030, 1, 1)}, InvalidOptionError),
        ({"queue": "q", "delay": -1}, InvalidOptionError),
        ({"queue": "q", "headers": {"x": object()}}, MessageSerializationError),
    ],
    ids=["empty-queue", "long-queue", "naive-datetime", "negative-delay", "bad-headers"],
)
async def test_bad_publish_raises_typed_error_and_writes_nothing(
    database_url, engine, tables, kwargs, error
):
    broker = SqlaBroker(database_url)
    async with broker:
        with pytest.raises(error):
            await broker.publish("x", **kwargs)
        with pytest.raises(MessageSerializationError, match="object"):
            await broker.publish_batch("ok", object(), queue="q")
    assert await rows(engine, tables.message) == []


async def test_queue_names_are_data_not_sql(database_url, engine, tables):
    hostile = "q'; DROP TABLE message; --"
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(hostile, **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((body, msg.queue, msg.headers["h"]))

    async with broker:
        await broker.start()
        await broker.publish("x", queue=hostile, headers={"h": "'); DELETE FROM message; --"})
        await got.wait_for(1)
    assert got.calls == [("x", hostile, "'); DELETE FROM message; --")]
    (row,) = await rows(engine, tables.archive)
    assert row["queue"] == hostile


async def test_queue_names_that_differ_in_case_or_trailing_spaces_are_different_queues(
    make_broker, engine, tables
):
    """MySQL and MariaDB compare text case-blind and ignore trailing spaces unless told
    otherwise (migration 0008): queues must stay apart as on PostgreSQL and SQLite."""
    broker = make_broker()
    got = recording(broker, "orders", record=lambda body, msg: (body, msg.queue))

    async with broker:
        await broker.start()
        await broker.publish_batch("other case", queue="Orders")
        await broker.publish_batch("trailing space", queue="orders ")
        await broker.publish("mine", queue="orders")
        await got.wait_for(1)

        async def archived() -> bool:
            return bool(await rows(engine, tables.archive))

        await wait_until(archived)
    assert got.calls == [("mine", "orders")]
    left = await rows(engine, tables.message)
    assert sorted(row["queue"] for row in left) == ["Orders", "orders "]


# -- start-up checks ------------------------------------------------------------------


async def test_missing_schema_names_the_command(database_url):
    broker = SqlaBroker(database_url, message_table="absent", archive_table="absent_archive")
    with pytest.raises(SchemaMissingError, match="faststream-sqla db upgrade"):
        await broker.start()


@pytest.mark.parametrize(
    ("stored", "advice"),
    [(None, "faststream-sqla db upgrade"), ("9999_future", "upgrade the faststream-sqla package")],
    ids=["behind", "unknown"],
)
async def test_outdated_schema_says_what_to_do(database_url, engine, stored, advice):
    version = sa.table("faststream_sqla_version", sa.column("version_num"))
    async with engine.begin() as conn:
        current = (await conn.execute(sa.select(version.c.version_num))).scalar_one()
        if stored is None:
            await conn.execute(version.delete())
        else:
            await conn.execute(version.update().values(version_num=stored))
    try:
        with pytest.raises(SchemaOutdatedError, match=advice):
            await SqlaBroker(database_url).start()
    finally:
        async with engine.begin() as conn:
            await conn.execute(version.delete())
            await conn.execute(version.insert().values(version_num=current))


async def test_unreachable_database_is_a_typed_error(dialect_name, tmp_path):
    url = {
        "sqlite": f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/q.db",
        "postgresql": "postgresql+asyncpg://postgres@127.0.0.1:1/test",
        "mysql": "mysql+asyncmy://root@127.0.0.1:1/test",
    }[dialect_name]
    async with threads_finish_before_the_loop_closes():
        with pytest.raises(DatabaseUnreachableError, match="cannot reach"):
            await SqlaBroker(url).start()


# -- connection loss (server databases: an embedded SQLite has no connection to lose) --

KILL_OTHERS = {
    "postgresql": "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()",
}


async def _kill_other_connections(url: str) -> int:
    admin = create_async_engine(url)
    async with admin.connect() as conn:
        if admin.dialect.name == "postgresql":
            killed = len((await conn.execute(sa.text(KILL_OTHERS["postgresql"]))).all())
        else:
            ids = (
                await conn.execute(
                    sa.text(
                        "SELECT id FROM information_schema.processlist "
                        "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
                    )
                )
            ).scalars().all()
            for pid in ids:
                await conn.execute(sa.text(f"KILL CONNECTION {int(pid)}"))
            killed = len(ids)
    await admin.dispose()
    return killed


@pytest.mark.parametrize("server", on_servers())
async def test_lost_connections_are_replaced_and_nothing_is_lost(server, server_databases):
    url = server_databases[server]
    broker = SqlaBroker(url)
    got = recording(broker, "reconnect", body=int)

    async with broker:
        await broker.start()
        await broker.publish(1, queue="reconnect")
        await got.wait_for(1)
        assert await _kill_other_connections(url) >= 1
        await broker.publish_batch(2, 3, queue="reconnect")
        await got.wait_for(3)
    assert sorted(got.calls) == [1, 2, 3]


# -- loops survive failures -----------------------------------------------------------


async def _archived_count(engine, tables, n: int) -> bool:
    return len(await rows(engine, tables.archive)) == n


class FlakyOnce:
    """Wraps a driver method so its first `failures` calls raise, like a dropped link."""

    def __init__(self, method, failures: int) -> None:
        self.method, self.failures, self.calls = method, failures, 0

    async def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionResetError("injected failure")
        return await self.method(*args, **kwargs)


@pytest.mark.parametrize("operation", ["claim", "write_outcomes"])
async def test_failing_loop_step_is_retried_and_nothing_is_lost(
    make_broker, engine, tables, operation
):
    broker = make_broker()
    got = recording(broker, "q", body=int)

    async with broker:
        await broker.connect()
        driver = broker.config.driver
        flaky = FlakyOnce(getattr(driver, operation), failures=3)
        setattr(driver, operation, flaky)
        await broker.publish_batch(1, 2, queue="q")
        await broker.start()
        await got.wait_for(2)
        # the loops' own retries must get them archived, not the final flush at stop
        await wait_until(lambda: _archived_count(engine, tables, 2))
        await broker.stop()

    assert flaky.calls > 3
    assert sorted(got.calls) == [1, 2]  # each handled once: failed flushes were retried
    assert [r["state"] for r in await rows(engine, tables.archive)] == [MessageState.COMPLETED] * 2


@pytest.mark.parametrize("server", on_servers())
async def test_open_outbox_transaction_does_not_hold_up_other_messages(server, server_databases):
    """Outcome writes find their rows by key: an uncommitted publish elsewhere in the
    table (row locked by its transaction) must not stall them."""
    url = server_databases[server]
    engine = create_async_engine(url)
    tables = QueueTables()
    broker = SqlaBroker(url)
    got = recording(broker, "busy")

    async def archived_once() -> bool:
        return len(await rows(engine, tables.archive, tables.archive.c.queue == "busy")) == 1

    try:
        async with broker, engine.connect() as open_txn:
            await broker.start()
            await broker.publish("held", queue="elsewhere", connection=open_txn)  # stays open
            await broker.publish("free", queue="busy")
            await got.wait_for(1)
            await wait_until(archived_once, timeout=20)
            await open_txn.rollback()
    finally:
        async with engine.begin() as conn:
            await conn.execute(tables.message.delete())
            await conn.execute(tables.archive.delete())
        await engine.dispose()


async def test_outcome_batches_are_written_two_at_a_time(make_broker, engine, tables):
    """A second outcome batch does not wait for the first one's commit."""
    broker = make_broker()
    got = recording(broker, "q", body=int, fetch_batch_size=5, max_workers=5)

    second_started = asyncio.Event()
    calls = 0
    overlapped = False

    async with broker:
        await broker.connect()
        driver = broker.config.driver
        write = driver.write_outcomes

        async def overlapping_write(engine_, outcomes):
            nonlocal calls, overlapped
            calls += 1
            if calls == 1:
                # Held until another batch's write begins, which happens only if writes
                # overlap; a one-at-a-time flusher would sit out the whole timeout.
                try:
                    await asyncio.wait_for(second_started.wait(), timeout=10)
                    overlapped = True
                except asyncio.TimeoutError:
                    pass
            else:
                second_started.set()
            return await write(engine_, outcomes)

        driver.write_outcomes = overlapping_write
        await broker.publish_batch(*range(20), queue="q")
        await broker.start()
        await got.wait_for(20)
        await wait_until(lambda: _archived_count(engine, tables, 20))

    assert overlapped
    assert sorted(got.calls) == list(range(20))
