"""Small tools the integration tests share."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from faststream_sqla import SqlaBroker, SqlaMessage
from faststream_sqla.clock import utc_now
from faststream_sqla.drivers import driver_for
from faststream_sqla.drivers.base import Driver, NewMessage, with_retries
from faststream_sqla.schema import BreakerState, QueueTables

FAST = {
    "min_fetch_interval": 0.0,
    "max_fetch_interval": 0.05,
    "flush_interval": 0.01,
}


class Recorder:
    """Collects handler calls and lets a test await the n-th one (no sleeping)."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    def record(self, item: Any) -> None:
        self.calls.append(item)
        for n, fut in self._waiters:
            if len(self.calls) >= n and not fut.done():
                fut.set_result(None)

    async def wait_for(self, n: int, timeout: float = 30.0) -> list[Any]:
        if len(self.calls) < n:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append((n, fut))
            await asyncio.wait_for(fut, timeout)
        return self.calls


def recording(
    broker: SqlaBroker,
    queue: str,
    *,
    body: type = str,
    record: Callable[[Any, SqlaMessage], Any] | None = None,
    **options: Any,
) -> Recorder:
    """A subscriber on `queue` (FAST intervals unless `options` say otherwise) whose handler
    takes a body of type `body` and records it, or what `record(body, msg)` returns;
    returns its Recorder. A handler that does more than record is declared in its test."""
    got = Recorder()
    if record is None:

        async def handle(payload):  # type: ignore[no-untyped-def]
            got.record(payload)

        handle.__annotations__ = {"payload": body, "return": None}
    else:

        async def handle(payload, msg):  # type: ignore[no-untyped-def]
            got.record(record(payload, msg))

        handle.__annotations__ = {"payload": body, "msg": SqlaMessage, "return": None}
    broker.subscriber(queue, **{**FAST, **options})(handle)
    return got


@asynccontextmanager
async def one_handled(
    broker: SqlaBroker, got: Recorder, body: Any = "x", *, queue: str = "q", calls: int = 1
) -> AsyncIterator[int]:
    """Start `broker`, publish `body` to `queue` and wait for the `calls`-th call `got`
    records; the block runs while the broker still runs and gets the message's id. The
    broker stops at the block's end, so that the outcomes are written."""
    async with broker:
        await broker.start()
        message_id = await broker.publish(body, queue=queue)
        await got.wait_for(calls)
        yield message_id


async def handle_one(
    broker: SqlaBroker, got: Recorder, body: Any = "x", *, queue: str = "q", calls: int = 1
) -> int:
    """`one_handled` with nothing to do in the block: the id of the message handled."""
    async with one_handled(broker, got, body, queue=queue, calls=calls) as message_id:
        return message_id


async def rows(engine: AsyncEngine, table: sa.Table, *where: Any) -> list[sa.RowMapping]:
    async with engine.connect() as conn:
        result = await conn.execute(sa.select(table).where(*where).order_by(table.c.id))
        return list(result.mappings())


async def wait_until(
    predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.02
) -> None:
    """Poll the database for a state no event announces (another process's writes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval)


async def archived(engine: AsyncEngine, tables: QueueTables) -> list[sa.RowMapping]:
    return await rows(engine, tables.archive)


# -- the driver routes (tests/drivers: test_postgresql_driver_path, test_mysql_driver_path)


@asynccontextmanager
async def one_connection_engine(url: str) -> AsyncIterator[AsyncEngine]:
    """An engine whose pool holds one connection, so a test knows which connection the
    next checkout returns, over emptied queue tables."""
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    tables = QueueTables()
    async with engine.begin() as conn:
        for table in (*tables.for_dialect(engine.dialect.name).live, tables.archive):
            await conn.execute(table.delete())
    try:
        yield engine
    finally:
        await engine.dispose()


async def prepared_driver(engine: AsyncEngine) -> Driver:
    """The engine's driver, set up as the broker sets it up at connect."""
    driver = driver_for(engine, QueueTables())
    driver.configure_engine(engine, owned=False)
    await driver.prepare(engine)
    return driver


def plain_message(queue: str = "q") -> NewMessage:
    return NewMessage(queue=queue, headers={}, headers_json="{}", payload=b"p",
                      correlation_id=None, publish_at=None, publish_delay=0.0)


async def claim_after_losing_the_connection(
    driver: Driver, engine: AsyncEngine, queue: str
) -> list[Any]:
    """After the pooled connection was killed: the first claim fails as SQLAlchemy
    reports a lost connection (so is_disconnect, and callers, know it), and the retry
    gets a fresh connection. Returns the retried claim's rows."""
    with pytest.raises(sa.exc.DBAPIError) as lost:
        await driver.claim(engine, queue, 10)
    assert lost.value.connection_invalidated and driver.is_disconnect(lost.value)
    return await with_retries(driver, lambda: driver.claim(engine, queue, 10))


# -- outages ----------------------------------------------------------------------
class TcpProxy:
    """Forwards 127.0.0.1:<port> to the database server, until `cut()` closes the
    listening socket and every connection through it: the network between the broker
    and its database goes away, while the server keeps running for everyone else.
    `restore()` listens on the same port again."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def restore(self) -> None:
        await self.start()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()
        await self.server.wait_closed()


class CuttableDatabase:
    """The test database behind a link that a test can cut and restore: a TCP proxy
    for a server, a directory that moves away for SQLite (whose connections are then
    dropped, so the next one cannot open the file). `url` goes through the link;
    `direct_url` does not."""

    def __init__(self, database_url: str, dialect_name: str, tmp_path: Path) -> None:
        self.dialect_name = dialect_name
        url = sa.make_url(database_url)
        self.proxy: TcpProxy | None = None
        if dialect_name == "sqlite":
            self.home, self.away = tmp_path / "db", tmp_path / "db-away"
            self.home.mkdir()
            shutil.copy(url.database or "", self.home / "queue.db")
            self.url = self.direct_url = url.set(database=str(self.home / "queue.db"))
        else:
            default_port = 5432 if dialect_name == "postgresql" else 3306
            self.proxy = TcpProxy(url.host or "127.0.0.1", url.port or default_port)
            self.direct_url = url
            self.url = url  # set by start()

    async def start(self) -> None:
        if self.proxy is not None:
            await self.proxy.start()
            self.url = self.direct_url.set(host="127.0.0.1", port=self.proxy.port)

    async def cut(self, engine: AsyncEngine) -> None:
        if self.proxy is not None:
            await self.proxy.cut()
        else:
            self.home.rename(self.away)
            await engine.dispose()

    async def restore(self) -> None:
        if self.proxy is not None:
            await self.proxy.restore()
        else:
            self.away.rename(self.home)


# -- logs ---------------------------------------------------------------------------
class LogLines(logging.Handler):
    """Every record a logger emits, for tests that count what was logged. (A broker's
    logger does not propagate to the root, so pytest's caplog does not see it.)"""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]

    def containing(self, text: str) -> list[logging.LogRecord]:
        return [record for record in self.records if text in record.getMessage()]


def captured_logger(name: str) -> tuple[logging.Logger, LogLines]:
    """A logger to hand a broker (`SqlaBroker(..., logger=...)`) and what it logs."""
    logger = logging.getLogger(name)
    logger.setLevel(logging.INFO)
    lines = LogLines()
    logger.addHandler(lines)
    return logger, lines


async def due_channel_breaker(
    engine: AsyncEngine,
    tables: QueueTables,
    queue: str,
    channel: str,
    state: BreakerState,
    *,
    failures: int,
    changed_ago: float = 10,
) -> None:
    """A channel's control row whose circuit breaker is `state` and whose cooldown
    ended a second ago: its next channel claim may probe it."""
    async with engine.begin() as conn:
        await conn.execute(
            tables.controls.insert().values(
                queue=queue,
                channel=channel,
                updated_at=utc_now(),
                breaker_state=state.value,
                breaker_failures=failures,
                breaker_changed_at=utc_now(-changed_ago),
                breaker_reopens_at=utc_now(-1),
            )
        )


def client_ports(pid: int) -> set[int]:
    """The local TCP ports of process `pid`'s sockets: how a database server names the
    connections of one client process (its sockets' inodes, found in /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


async def holds_a_transaction(
    engine, dialect_name: str, database_url: str, *, pid: int | None = None
) -> bool:
    """Whether another client of this test's database (only process `pid`'s connections,
    if given) is inside a transaction (or, on SQLite, whether anyone holds the write
    lock): a process stopped there would block everyone else."""
    if dialect_name == "sqlite":
        probe = sqlite3.connect(sa.make_url(database_url).database, timeout=0)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    if dialect_name == "postgresql":
        sql = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND (state = 'active' OR xact_start IS NOT NULL)"
        )
        port = "client_port"
    else:
        sql = (
            "SELECT count(*) FROM information_schema.innodb_trx t "
            "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
            "WHERE p.db = DATABASE() AND p.id <> CONNECTION_ID()"
        )
        port = "CAST(SUBSTRING_INDEX(p.host, ':', -1) AS UNSIGNED)"
    params: dict[str, Any] = {}
    statement = sa.text(sql)
    if pid is not None:
        # another test's leftover client in the same database must not count
        statement = sa.text(f"{sql} AND {port} IN :ports").bindparams(
            sa.bindparam("ports", expanding=True)
        )
        params["ports"] = sorted(client_ports(pid)) or [0]
    async with engine.connect() as conn:
        return bool(await conn.scalar(statement, params))


async def open_transactions(engine, dialect_name: str) -> list[tuple[Any, ...]]:
    """Who is inside a transaction in this test's database, and doing what: what a
    test that waited in vain for none reports."""
    if dialect_name == "sqlite":
        return []
    if dialect_name == "postgresql":
        sql = (
            "SELECT pid, client_port, state, xact_start, left(query, 200) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND (state = 'active' OR xact_start IS NOT NULL)"
        )
    else:
        sql = (
            "SELECT p.id, p.host, t.trx_started, t.trx_state, LEFT(t.trx_query, 200) "
            "FROM information_schema.innodb_trx t "
            "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
            "WHERE p.db = DATABASE() AND p.id <> CONNECTION_ID()"
        )
    async with engine.connect() as conn:
        return [tuple(row) for row in await conn.execute(sa.text(sql))]


# -- the console script, as a shell runs it ------------------------------------------

SCRIPT = Path(sys.executable).parent / "faststream-sqla"


async def run_script(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`faststream-sqla <args> --url <url>` in a process of its own: its stderr is what
    a user sees, with Python's default logging and warnings (CliRunner shares ours)."""
    return await asyncio.to_thread(
        subprocess.run,
        [str(SCRIPT), *args, "--url", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


async def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -c <code> <args>` in a process of its own (see `run_script`)."""
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


@asynccontextmanager
async def threads_finish_before_the_loop_closes() -> AsyncIterator[None]:
    """Waits, at the end of the block, for the aiosqlite threads started inside it.
    aiosqlite stops a connection that failed to open by queueing a close to its worker
    thread without awaiting it; if the test's event loop closes first, that thread fails
    on it. (Other threads, such as the loop's executor, may well outlive the block.)"""
    before = set(threading.enumerate())
    yield
    started = [
        t for t in threading.enumerate()
        if t not in before and "_connection_worker_thread" in t.name  # aiosqlite's
    ]  # fmt: skip

    async def finished() -> bool:
        return not any(t.is_alive() for t in started)

    await wait_until(finished)
