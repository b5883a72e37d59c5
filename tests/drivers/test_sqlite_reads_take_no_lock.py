"""SQLite: the broker's reads (connect, schema check, ping, backpressure probe) never
wait behind another process's write transaction; only its writes take the lock."""

from __future__ import annotations

import sqlite3

import pytest

from faststream_sqla import SqlaBroker, upgrade_schema
from faststream_sqla.migrations import current_revision


@pytest.fixture
async def locked_database(tmp_path):
    """A database with our schema, and another connection holding its write lock
    (as a writing process would) for the whole test."""
    path = tmp_path / "queue.db"
    await upgrade_schema(f"sqlite+aiosqlite:///{path}")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("CREATE TABLE held_by_another_writer (id INTEGER)")
    yield f"sqlite+aiosqlite:///{path}", writer
    writer.execute("ROLLBACK")
    writer.close()


async def test_reads_do_not_wait_for_another_writer(locked_database):
    url, writer = locked_database
    broker = SqlaBroker(url, max_queue_size=10)
    # Before: each of these began BEGIN IMMEDIATE and failed after the 30 s busy
    # timeout with "database is locked".
    await broker.connect()
    assert await broker.ping()
    assert await current_revision(url)
    # the publish itself is a write: it waits its turn, so it comes once the lock is free
    writer.execute("ROLLBACK")
    writer.execute("BEGIN")  # the fixture's ROLLBACK ends this one
    assert await broker.publish("x", queue="q")
    await broker.stop()
