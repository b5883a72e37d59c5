"""The dashboard's read timeout on every database: while another connection holds a
lock that keeps its reads waiting, the API answers 503 and a page shows a banner in
place of the figures; once the lock is gone the reads work again; the changes made
through it (pause, redrive) are not bound and wait for the lock."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from faststream_sqla import ReadTimeoutError, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.dashboard import create_app
from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.schema import QueueTables
from tests.support.helpers import wait_until

from .conftest import fail, ok

BOUND = 0.2


class LockHeld:
    """A lock another connection holds on the queue's tables, and a look at whether
    a statement is waiting for it (None where the database cannot tell: SQLite)."""

    def __init__(self, engine: AsyncEngine, tables: QueueTables) -> None:
        self.engine = engine
        quote = engine.dialect.identifier_preparer.format_table
        self.names = [quote(t) for t in (tables.message, tables.archive, tables.controls)]

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            # WAL readers never wait for a writer; a connection in exclusive locking
            # mode keeps every other connection out of the file until it closes. It
            # takes that lock only while no other connection has the file open: the
            # pool's idle connections are closed first.
            await self.engine.dispose()
            holder = sqlite3.connect(self.engine.url.database, isolation_level=None)
            holder.execute("PRAGMA locking_mode = EXCLUSIVE")
            holder.execute("BEGIN EXCLUSIVE")
            try:
                yield
            finally:
                holder.close()
            return
        async with self.engine.connect() as conn:
            if dialect == "postgresql":
                await conn.exec_driver_sql(
                    f"LOCK TABLE {', '.join(self.names)} IN ACCESS EXCLUSIVE MODE"
                )
                yield
                await conn.rollback()
            else:
                await conn.exec_driver_sql(
                    "LOCK TABLES " + ", ".join(f"{name} WRITE" for name in self.names)
                )
                yield
                await conn.exec_driver_sql("UNLOCK TABLES")

    async def waiters(self) -> int | None:
        dialect = self.engine.dialect.name
        if dialect == "sqlite":
            return None
        query = (
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND datname = current_database()"
            if dialect == "postgresql"
            else "SELECT count(*) FROM information_schema.processlist"
            " WHERE state LIKE 'Waiting for table%%' AND db = DATABASE()"
        )
        async with self.engine.connect() as conn:
            return int((await conn.exec_driver_sql(query)).scalar_one())

    async def until_waited_on(self) -> None:
        """Returns once a statement waits for the lock (at once where none can tell)."""

        async def waited_on() -> bool:
            found = await self.waiters()
            return found is None or found > 0

        await wait_until(waited_on)


@pytest.fixture
def lock(engine: AsyncEngine, tables: QueueTables) -> LockHeld:
    return LockHeld(engine, tables)


@asynccontextmanager
async def dashboard_bound(engine: AsyncEngine) -> AsyncIterator[object]:
    import httpx

    app = create_app(engine, read_timeout=BOUND)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            yield http


async def test_a_read_blocked_past_its_bound_answers_503_and_a_banner_then_works_again(
    database_url, engine, lock
):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("a", queue="q")
    async with dashboard_bound(engine) as http:
        assert ok(await http.get("/api/queues"))["queues"][0]["queue"] == "q"

        async with lock.held():
            answer = await http.get("/api/queues")
            assert answer.status_code == 503
            assert answer.json()["error"].startswith(
                f"the database did not answer within {BOUND:g} s; figures not shown"
            )
            page = await http.get("/")
            assert page.status_code == 503
            assert 'class="banner unavailable" role="alert"' in page.text
            assert f"did not answer within {BOUND:g} s; figures not shown" in page.text

        assert ok(await http.get("/api/queues"))["queues"][0]["queue"] == "q"
        assert (await http.get("/")).status_code == 200


async def test_the_admin_raises_read_timed_out_naming_its_bound(database_url, engine, lock):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish("a", queue="q")
    admin = QueueAdmin(engine, read_timeout=BOUND)
    assert [q.queue for q in await admin.queues()] == ["q"]
    async with lock.held():
        with pytest.raises(ReadTimeoutError, match=f"within {BOUND:g} s") as raised:
            await admin.queues()
    assert raised.value.seconds == BOUND
    assert [q.queue for q in await admin.queues()] == ["q"]


async def test_pause_and_redrive_are_not_bound_by_the_read_timeout(
    database_url, driver, engine, lock
):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("a", "b", queue="q")
    (dead,) = await fail(driver, engine, "q", 1)
    async with dashboard_bound(engine) as http:
        ok(await http.get("/api/queues"))
        ok(await http.get("/api/breakers"))
        async with lock.held():
            pause = asyncio.create_task(http.post("/api/queues/q/pause"))
            await lock.until_waited_on()
            redrive = asyncio.create_task(
                http.post("/api/dead-letters/redrive", json={"ids": [dead]})
            )
            # a read started after both changes began to wait trips its bound: both
            # have waited longer than the bound, and still wait
            assert (await http.get("/api/breakers")).status_code == 503
            assert not pause.done() and not redrive.done()
        assert ok(await pause) == {"changed": True}
        assert [int(i) for i in ok(await redrive)["moved"]] == [dead]
        (queue,) = ok(await http.get("/api/queues"))["queues"]
        assert queue["paused"]


@pytest.mark.parametrize("bad", [0, 0.05, 301, -1, True, "5"])
def test_a_read_timeout_out_of_bounds_is_refused_naming_the_option(bad):
    with pytest.raises(InvalidOptionError, match="read_timeout"):
        QueueAdmin("sqlite+aiosqlite:///unused.db", read_timeout=bad)
    with pytest.raises(InvalidOptionError, match="read_timeout"):
        create_app("sqlite+aiosqlite:///unused.db", read_timeout=bad)
