"""SQLite: an admin read that runs past the read timeout, not waiting for a lock but
still working, is interrupted and raises ReadTimeoutError; the connection is usable
after it."""

from __future__ import annotations

import sqlite3

import pytest

from faststream_sqla import ReadTimeoutError, upgrade_schema
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import QueueTables

BOUND = 0.2


def endless_archive(path) -> None:
    """The archive replaced by a view of the same columns over rows that never end: a
    read of it runs until something stops it."""
    archive = QueueTables(dialect="sqlite").archive
    # a queue and a state the read asks for, and times that vary (a page is sorted)
    values = {"id": "i", "queue": "'billing'", "state": "'FAILED'", "archived_at": "i"}
    columns = ", ".join(f"{values.get(c.name, 'NULL')} AS {c.name}" for c in archive.columns)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"DROP TABLE {archive.name}")
    conn.execute(
        f"CREATE VIEW {archive.name} AS WITH RECURSIVE n(i) AS "
        "(SELECT 1 UNION ALL SELECT i + 1 FROM n) "
        f"SELECT {columns} FROM n"
    )
    conn.close()


async def test_a_read_still_running_at_its_bound_is_interrupted(tmp_path):
    path = tmp_path / "queue.db"
    url = f"sqlite+aiosqlite:///{path}"
    await upgrade_schema(url)
    endless_archive(path)
    async with QueueAdmin(url, read_timeout=BOUND) as admin:
        with pytest.raises(ReadTimeoutError, match=f"within {BOUND:g} s"):
            await admin.dead_letters(queue="billing")
        # the interrupted connection went back to the pool in working order
        assert await admin.bindings() == []
