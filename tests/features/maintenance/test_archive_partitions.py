"""PostgreSQL's monthly archive partitions: made from an archive with rows, kept up by
`maintain`, transparent to the broker, inspect and replay. Elsewhere the same calls
refuse with one clear error."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from faststream_sqla import InvalidOptionError, MessageState, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.drivers.postgresql.partitions import is_partitioned
from faststream_sqla.lifecycle import settled_unhandled
from faststream_sqla.schema import QueueTables
from tests.support.helpers import recording

OLD = datetime(2024, 1, 15, 12, 0)


async def _archive_one(driver, engine, queue):
    (message,) = await driver.claim(engine, queue, 1)
    assert await driver.write_outcomes(
        engine, [settled_unhandled(message, MessageState.FAILED, "boom")]
    ) == 1
    return message.id


async def _partitions(engine):
    async with engine.connect() as conn:
        return sorted(
            (
                await conn.execute(
                    sa.text(
                        "SELECT c.relname FROM pg_inherits i JOIN pg_class c "
                        "ON c.oid = i.inhrelid WHERE i.inhparent = 'message_archive'::regclass"
                    )
                )
            ).scalars()
        )


async def test_partitioning_keeps_rows_and_maintain_keeps_months(
    database_url, make_broker, engine, driver, dialect_name, tables
):
    admin = QueueAdmin(engine)
    if dialect_name != "postgresql":
        with pytest.raises(InvalidOptionError, match="PostgreSQL feature"):
            await admin.partition_archive()
        with pytest.raises(InvalidOptionError, match="PostgreSQL feature"):
            await admin.maintain_archive()
        return
    a = tables.archive
    try:
        async with SqlaBroker(database_url) as broker:
            await broker.connect()
            await broker.publish_batch("old", "recent", queue="q")
        old_id = await _archive_one(driver, engine, "q")
        recent_id = await _archive_one(driver, engine, "q")
        async with engine.begin() as conn:  # one row from long ago
            await conn.execute(sa.update(a).where(a.c.id == old_id).values(archived_at=OLD))

        report = await admin.partition_archive(months_ahead=2)
        async with engine.connect() as conn:
            assert await is_partitioned(conn, "message_archive")
        today = datetime.now(timezone.utc).date()
        assert report.created[0] == "message_archive_p202401"
        assert report.created[-1] == f"message_archive_p{_month(today, 2):%Y%m}"
        assert "message_archive_pdefault" in await _partitions(engine)
        # rows kept, found by id, in their month
        assert (await admin.inspect(old_id)).archived_at.year == 2024
        assert (await admin.inspect(recent_id)).state == "FAILED"
        async with engine.connect() as conn:
            where = await conn.scalar(sa.text(
                "SELECT tableoid::regclass::text FROM message_archive WHERE id = :id"
            ), {"id": old_id})
        assert where == "message_archive_p202401"
        assert (await admin.partition_archive()).created == []  # once only

        # the broker archives into the partitions; replay reads across them
        broker = make_broker()
        got = recording(broker, "q")

        async with broker:
            await broker.connect()
            moved = await admin.replay(queue="q", states=["FAILED"])
            assert sorted(moved.moved) == sorted([old_id, recent_id])
            await broker.start()
            assert sorted(await got.wait_for(2)) == ["old", "recent"]

        # a row far ahead lands in the default; maintain moves it when its month comes
        far = _month(today, 4)
        async with engine.begin() as conn:
            await conn.execute(sa.text(
                "INSERT INTO message_archive (id, queue, headers, payload, attempts_count, "
                "deliveries_count, claims_count, created_at, archived_at, state, priority) "
                "VALUES (999999, 'q', '{}', 'x', 1, 1, 1, :at, :at, 'COMPLETED', 0)"
            ), {"at": datetime(far.year, far.month, 2)})
        kept = await admin.maintain_archive(months_ahead=4, retention=timedelta(days=365))
        assert f"message_archive_p{far:%Y%m}" in kept.created
        assert "message_archive_p202401" in kept.dropped  # its month ended over a year ago
        async with engine.connect() as conn:
            where = await conn.scalar(sa.text(
                "SELECT tableoid::regclass::text FROM message_archive WHERE id = 999999"
            ))
        assert where == f"message_archive_p{far:%Y%m}"
        with pytest.raises(InvalidOptionError, match="months_ahead"):
            await admin.maintain_archive(months_ahead=99)
    finally:
        await _unpartition(engine)


def _month(day: date, offset: int) -> date:
    index = day.year * 12 + day.month - 1 + offset
    return date(index // 12, index % 12 + 1, 1)


async def _unpartition(engine):
    """Back to the plain archive the other tests expect, as the migrations make it."""
    async with engine.begin() as conn:
        if await is_partitioned(conn, "message_archive"):
            await conn.exec_driver_sql("DROP TABLE message_archive")
            await conn.run_sync(QueueTables().archive.create)
