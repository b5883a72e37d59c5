"""SQLite: a file not yet in WAL mode is switched by the first connection that can.
Switching needs the file to itself, and SQLite refuses it at once, whatever
busy_timeout says, while another connection holds the write lock: such a connection
waits for the lock and tries again, within the busy timeout's length."""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.drivers.sqlite.driver import SQLiteDriver, switch_to_wal
from faststream_sqla.schema import QueueTables

SWITCH = "PRAGMA journal_mode = WAL"
ENGINES = 4
#: rounds of engines opening one new file together; the race is refused in a few
#: percent of rounds, so a connect that did not wait would fail in some of these
ROUNDS = 40


def file_in_rollback_journal_mode(path) -> str:
    """A database file as an engine of the user's (or a migration's) leaves it: a
    table, and the default rollback journal rather than WAL."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kept (id INTEGER)")
    conn.commit()
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()
    return f"sqlite+aiosqlite:///{path}"


def statements_run(conn: sqlite3.Connection) -> list[str]:
    """The statements `conn` runs from now on, as they start."""
    run: list[str] = []
    conn.set_trace_callback(run.append)
    return run


async def test_engines_opening_a_new_file_at_once_all_connect_in_wal_mode(tmp_path):
    driver = SQLiteDriver(QueueTables(dialect="sqlite"))
    for round_ in range(ROUNDS):
        url = file_in_rollback_journal_mode(tmp_path / f"queue{round_}.db")
        engines = [create_async_engine(url) for _ in range(ENGINES)]
        for engine in engines:
            driver.configure_engine(engine, owned=True)

        async def first_write(engine):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO kept VALUES (1)"))
                return (await conn.execute(text("PRAGMA journal_mode"))).scalar()

        try:
            modes = await asyncio.gather(*map(first_write, engines))
        finally:
            await asyncio.gather(*(engine.dispose() for engine in engines))
        assert modes == ["wal"] * ENGINES


def test_a_switch_refused_while_another_connection_writes_waits_for_it(tmp_path):
    path = tmp_path / "queue.db"
    file_in_rollback_journal_mode(path)
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO kept VALUES (1)")
    switching = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    switching.execute("PRAGMA busy_timeout = 30000")
    waits_for_the_writer: Future[None] = Future()
    switching.set_trace_callback(
        lambda sql: sql.startswith("BEGIN") and waits_for_the_writer.set_result(None)
    )
    with ThreadPoolExecutor(1) as pool:
        switched = pool.submit(switch_to_wal, switching.cursor(), SWITCH)
        wait([switched, waits_for_the_writer], return_when=FIRST_COMPLETED)
        if switched.done():
            switched.result()  # refused, not waiting: raises "database is locked"
        writer.execute("COMMIT")
        switched.result()
    assert switching.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert writer.execute("SELECT count(*) FROM kept").fetchone() == (1,)
    writer.close()
    switching.close()


def test_a_switch_a_reader_holds_back_fails_after_one_busy_timeout(tmp_path):
    path = tmp_path / "queue.db"
    file_in_rollback_journal_mode(path)
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM kept").fetchone()
    switching = sqlite3.connect(path, isolation_level=None)
    switching.execute("PRAGMA busy_timeout = 50")
    run = statements_run(switching)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        switch_to_wal(switching.cursor(), SWITCH, within=0.05)
    # each try waits out the busy timeout: the bound holds the tries, not only each one
    assert run.count(SWITCH) == 1
    reader.execute("ROLLBACK")
    reader.close()
    switching.close()
