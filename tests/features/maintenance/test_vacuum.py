"""The broker vacuums its message table where dead entries pile up (PostgreSQL):
`faststream_sqla.vacuum`."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.drivers.base import Outcome
from faststream_sqla.schema import MessageState
from faststream_sqla.vacuum import MIN_SETTLED_BETWEEN_VACUUMS, settled_between_vacuums

from tests.support.helpers import (
    FAST,
    Recorder,
    captured_logger,
    one_connection_engine,
    plain_message,
    prepared_driver,
)

READY_SCAN = (
    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT id FROM message WHERE queue = 'q' "
    "AND state IN ('PENDING', 'RETRYABLE') AND channel IS NULL ORDER BY next_attempt_at, id "
    "LIMIT 10"
)


async def ready_scan_buffers(engine) -> int:
    """Buffers the claim's walk of the ready index touches on an empty queue."""
    async with engine.connect() as conn:
        plan = (await conn.scalar(sa.text(READY_SCAN)))[0]["Plan"]
    return plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]


@pytest.mark.databases("postgresql")
async def test_a_vacuum_takes_the_dead_head_out_of_the_claims_walk(server_databases):
    async with one_connection_engine(server_databases["postgresql"]) as engine:
        driver = await prepared_driver(engine)
        async with engine.begin() as conn:  # only the test's own work leaves dead rows
            await conn.exec_driver_sql("ALTER TABLE message SET (autovacuum_enabled = off)")
        try:
            await driver.vacuum_message_table(engine)  # whatever earlier tests left
            await driver.insert_committed(engine, [plain_message() for _ in range(3000)])
            while claimed := await driver.claim(engine, "q", 500):
                await driver.write_outcomes(engine, [
                    Outcome(id=m.id, token=m.token, state=MessageState.COMPLETED,
                            attempts_count=1, deliveries_count=m.deliveries_count)
                    for m in claimed
                ])
            walked = await ready_scan_buffers(engine)

            rows = await driver.vacuum_message_table(engine)

            assert rows == 0  # the estimate the next interval is sized by: nothing queued
            after = await ready_scan_buffers(engine)
            # 3000 dead entries fill several index pages, which every claim walked
            assert walked >= 5 and after < walked / 2, (walked, after)
        finally:
            async with engine.begin() as conn:
                await conn.exec_driver_sql("ALTER TABLE message RESET (autovacuum_enabled)")


def recording_broker(url, *, threshold: int, **options) -> tuple[SqlaBroker, Recorder]:
    """A broker on `url` whose subscriber of "q" records each body, and which vacuums
    after `threshold` settled messages."""
    broker = SqlaBroker(url, logger=None, **options)
    broker.config.vacuum.threshold = threshold
    seen = Recorder()

    @broker.subscriber("q", **FAST)
    async def handle(body: int) -> None:
        seen.record(body)

    return broker, seen


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_broker_vacuums_after_enough_settled_messages(database_url, enabled):
    broker, seen = recording_broker(database_url, threshold=100, vacuum_message_table=enabled)
    vacuum = broker.config.vacuum
    async with broker:
        await broker.start()
        await broker.publish_batch(*range(300), queue="q")
        await seen.wait_for(300)
        if vacuum.active:
            await asyncio.wait_for(vacuum.wait_for_vacuums(1), 30)
            # sized from the table now: never below the floor
            assert vacuum.threshold >= MIN_SETTLED_BETWEEN_VACUUMS
        # PostgreSQL only, and only when asked: MySQL purges dead entries itself and
        # SQLite deletes in place
        assert vacuum.active == (enabled and broker.engine.dialect.name == "postgresql")
        assert vacuum.vacuums == (1 if vacuum.active else 0)
    assert not vacuum.active  # stopped with the broker


@pytest.mark.databases("postgresql")
async def test_a_stopping_broker_starts_no_vacuum(server_databases):
    """The final flushes of a stopping broker still count settled messages; a vacuum
    begun then would only be cancelled."""
    broker, seen = recording_broker(server_databases["postgresql"], threshold=100)
    vacuum = broker.config.vacuum
    async with broker:
        await broker.start()
        vacuum.close()  # what stop() does first
        await broker.publish_batch(*range(300), queue="q")
        await seen.wait_for(300)
        await broker.stop()
    assert vacuum.vacuums == 0


NOT_OWNER = "fsqla_not_owner"


@pytest.mark.databases("postgresql")
async def test_a_user_who_may_not_vacuum_leaves_the_table_to_autovacuum(server_databases):
    """Least privilege: a role that may read and write the tables but does not own
    them. PostgreSQL would skip its every VACUUM with a warning, so none is tried."""
    url = make_url(server_databases["postgresql"])
    admin = create_async_engine(url)
    async with admin.begin() as conn:
        await conn.exec_driver_sql(  # xdist workers may race to create it
            f"DO $$ BEGIN CREATE ROLE {NOT_OWNER} LOGIN; "
            "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
        )
        await conn.exec_driver_sql(
            f"GRANT SELECT, INSERT, UPDATE, DELETE ON message, message_archive TO {NOT_OWNER}"
        )
        await conn.exec_driver_sql(f"GRANT SELECT ON faststream_sqla_version TO {NOT_OWNER}")
        await conn.exec_driver_sql(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {NOT_OWNER}")
    await admin.dispose()
    broker, seen = recording_broker(url.set(username=NOT_OWNER), threshold=10)
    async with broker:
        await broker.start()
        assert not broker.config.vacuum.active
        assert NOT_OWNER in (broker.config.driver.vacuum_denied or "")
        await broker.publish_batch(*range(50), queue="q")
        assert sorted(await seen.wait_for(50)) == list(range(50))  # consuming goes on


def test_the_interval_grows_with_the_square_root_of_the_table():
    assert settled_between_vacuums(-1) == MIN_SETTLED_BETWEEN_VACUUMS  # never analyzed
    assert settled_between_vacuums(10_000) == MIN_SETTLED_BETWEEN_VACUUMS
    assert settled_between_vacuums(1_000_000) == 40_000
    assert settled_between_vacuums(100_000_000) == 400_000


@pytest.mark.databases("postgresql")
async def test_no_vacuum_while_a_snapshot_keeps_every_dead_row(server_databases):
    """Under a long-held snapshot every vacuum once removed nothing, and
    45 of them drove the row estimate to about 0 and the claims to a sort of every
    ready row. Now a vacuum runs only when the horizon has moved since the last one."""
    url = server_databases["postgresql"]
    logger, records = captured_logger("test.vacuum.snapshot")
    broker = SqlaBroker(url, logger=logger)
    holder_engine = create_async_engine(url)
    try:
        async with broker:
            await broker.connect()
            vacuum, driver, engine = broker.config.vacuum, broker.config.driver, broker.engine
            async with holder_engine.connect() as holder:
                await holder.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
                holder_pid = await holder.scalar(sa.text("SELECT pg_backend_pid()"))
                await holder.scalar(sa.text("SELECT count(*) FROM message"))  # the snapshot

                assert await vacuum.vacuum_now(engine, driver)  # horizon noted
                ids = await broker.publish_batch(*range(200), queue="q")
                async with engine.begin() as conn:  # 200 dead rows the snapshot keeps
                    await conn.execute(sa.text("DELETE FROM message WHERE id = ANY(:ids)"),
                                       {"ids": ids})
                assert not await vacuum.vacuum_now(engine, driver)
                assert not await vacuum.vacuum_now(engine, driver)
                assert (vacuum.vacuums, vacuum.skipped) == (1, 2)
                told = [m for m in records.messages if "not vacuuming" in m]
                assert len(told) == 1  # once per streak, naming who holds the rows
                assert f"session {holder_pid} (idle in transaction" in told[0]
                await holder.rollback()
            assert await vacuum.vacuum_now(engine, driver)  # the horizon moved on
            assert vacuum.vacuums == 2
    finally:
        await holder_engine.dispose()
