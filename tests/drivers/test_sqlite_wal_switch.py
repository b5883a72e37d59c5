"""SQLite: engines that open a file not yet in WAL mode at the same moment all connect.
Switching a file to WAL takes an exclusive lock, and SQLite refuses one of two
connections that try at once without waiting on busy_timeout."""

from __future__ import annotations

import asyncio
import sqlite3

from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.drivers.sqlite.driver import SQLiteDriver
from faststream_sqla.schema import QueueTables

ENGINES = 4
#: rounds of engines opening one new file together; the race is refused in a few
#: percent of rounds, so a connect that did not wait would fail in one of these
ROUNDS = 40


def file_in_rollback_journal_mode(path) -> str:
    """A database file as an engine of the user's (or a migration's) leaves it: tables,
    and the default rollback journal rather than WAL."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE kept (id INTEGER)")
    conn.commit()
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    conn.close()
    return f"sqlite+aiosqlite:///{path}"


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
