"""SQLite runs the broker's own statements as one call on aiosqlite's thread."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import MessageState, SqlaBroker, upgrade_schema
from faststream_sqla.drivers.sqlite.driver import (
    immediate_transaction,
    in_driver_thread,
    through_sqlalchemy,
)
from faststream_sqla.schema import QueueTables
from tests.support.helpers import recording, rows


@pytest.fixture
async def sqlite_engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'driver.db'}")
    async with engine.begin() as conn:
        await conn.exec_driver_sql("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT)")
    yield engine
    await engine.dispose()


def insert_two(cursor: sqlite3.Cursor) -> int:
    cursor.execute("INSERT INTO item (name) VALUES (?), (?)", ("a", "b"))
    return int(cursor.lastrowid)


def insert_then_fail(cursor: sqlite3.Cursor) -> int:
    cursor.execute("INSERT INTO item (name) VALUES (?)", ("lost",))
    cursor.execute("INSERT INTO missing_table VALUES (1)")
    return 0


async def names(engine: AsyncEngine) -> list[str]:
    async with engine.connect() as conn:
        result = await conn.exec_driver_sql("SELECT name FROM item ORDER BY id")
        return [row[0] for row in result]


def test_installed_aiosqlite_has_the_one_call_dispatch() -> None:
    # Without it every statement falls back to SQLAlchemy's several calls: correct,
    # but slow under load. An aiosqlite release that drops it must fail here, loudly.
    assert callable(getattr(aiosqlite.Connection, "_execute", None))
    assert isinstance(getattr(aiosqlite.Connection, "_conn", None), property)


@pytest.mark.parametrize("route", [in_driver_thread, through_sqlalchemy])
async def test_immediate_transaction_commits_on_either_route(sqlite_engine, route) -> None:
    async with sqlite_engine.connect() as conn:
        last = await route(conn, immediate_transaction(insert_two))
    assert last == 2
    assert await names(sqlite_engine) == ["a", "b"]


@pytest.mark.parametrize("route", [in_driver_thread, through_sqlalchemy])
async def test_immediate_transaction_rolls_back_a_failed_operation(sqlite_engine, route) -> None:
    async with sqlite_engine.connect() as conn:
        # SQLAlchemy's exception types, as the other databases raise, the driver's inside
        with pytest.raises(sa.exc.OperationalError, match="missing_table") as raised:
            await route(conn, immediate_transaction(insert_then_fail))
        assert isinstance(raised.value.orig, sqlite3.OperationalError)
        # the connection is usable, and out of the failed transaction
        assert await route(conn, immediate_transaction(insert_two)) == 2
    assert await names(sqlite_engine) == ["a", "b"]


async def test_a_callers_own_sqlite_engine_publishes_and_consumes(tmp_path: Path) -> None:
    # An engine the caller made keeps the driver's own transaction handling (no
    # BEGIN IMMEDIATE hook of ours); the broker's statements must still commit.
    url = f"sqlite+aiosqlite:///{tmp_path / 'callers.db'}"
    await upgrade_schema(url)
    engine = create_async_engine(url)
    broker = SqlaBroker(engine)
    got = recording(broker, "q")

    try:
        async with broker:
            await broker.start()
            await broker.publish("committed", queue="q")
            async with engine.connect() as conn:  # the outbox, on the caller's engine
                await broker.publish("outbox", queue="q", connection=conn)
                await conn.commit()
            assert sorted(await got.wait_for(2)) == ["committed", "outbox"]
        archived = await rows(engine, QueueTables().archive)
        assert sorted(r["state"] for r in archived) == [MessageState.COMPLETED] * 2
    finally:
        await engine.dispose()


async def test_the_writer_lock_is_free_after_every_kind_of_write_ending(sqlite_engine) -> None:
    # Success hands the lock on before the connection's reset; a failure keeps it
    # until the connection is back. Either way the next writer gets it and commits.
    import asyncio

    from faststream_sqla.drivers.sqlite.driver import SQLiteDriver

    driver = SQLiteDriver(QueueTables())
    assert await driver._write(sqlite_engine, insert_two) == 2
    assert not driver._writer.locked()
    with pytest.raises(sa.exc.OperationalError, match="missing_table"):
        await driver._write(sqlite_engine, insert_then_fail)
    assert not driver._writer.locked()

    # two writers at once: the second waits for the first, both commit in turn
    first, second = await asyncio.gather(
        driver._write(sqlite_engine, insert_two), driver._write(sqlite_engine, insert_two)
    )
    assert sorted([first, second]) == [4, 6]
    assert not driver._writer.locked()
    assert await names(sqlite_engine) == ["a", "b"] * 3


async def test_a_write_that_ended_its_own_transaction_skips_the_pools_rollback(
    sqlite_engine,
) -> None:
    """The pool's rollback-on-return is one more hand-off to aiosqlite's thread; after a
    write that committed in its own call there is nothing to roll back, so it is
    skipped. After a failure the usual check-in (with its rollback) runs. Either way the
    connection goes back to the pool with no transaction open."""
    from sqlalchemy.util import greenlet_spawn

    from faststream_sqla.drivers.sqlite.driver import SQLiteDriver, call_in_thread

    resets: list[bool] = []

    @sa.event.listens_for(sqlite_engine.sync_engine.pool, "reset")
    def _reset(_dbapi_connection, _record, state) -> None:
        resets.append(state.transaction_was_reset)

    async def pooled_in_transaction() -> bool:
        raw = await sqlite_engine.raw_connection()
        try:
            return await call_in_thread(raw.driver_connection, lambda c: c.in_transaction)
        finally:
            await greenlet_spawn(raw.close)

    driver = SQLiteDriver(QueueTables())
    assert await driver._write(sqlite_engine, insert_two) == 2
    assert resets == [True]  # checked in as already reset: no rollback
    assert not await pooled_in_transaction()
    resets.clear()
    with pytest.raises(sa.exc.OperationalError, match="missing_table"):
        await driver._write(sqlite_engine, insert_then_fail)
    assert resets == [False]  # the usual check-in, with its rollback
    assert not await pooled_in_transaction()
    assert await names(sqlite_engine) == ["a", "b"]


async def test_work_on_the_driver_thread_runs_with_a_short_switch_interval(sqlite_engine):
    """The driver's thread gets the GIL back promptly at each hand-off while the broker's
    call runs (see drivers._gil), and the interval is as before once it is done."""
    import sys

    from faststream_sqla.drivers._gil import DRIVER_SWITCH_INTERVAL

    before = sys.getswitchinterval()
    async with sqlite_engine.connect() as conn:
        during = await in_driver_thread(conn, lambda _cursor: sys.getswitchinterval())
    assert during == pytest.approx(min(before, DRIVER_SWITCH_INTERVAL))
    assert sys.getswitchinterval() == before
