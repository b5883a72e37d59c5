"""The broker through a real PgBouncer in front of the shared PostgreSQL.

In transaction mode a server connection serves one transaction of one client, then the
next client's: prepared statements do not survive between them, and a LISTEN is lost
with its server connection. With `?statement_cache_size=0` in the URL everything the
broker runs works there; its listener finds out that notifications never arrive, says
so once, and the subscribers' polling delivers every message. In session mode the
listener hears as on a direct connection.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from chaos.servers import _as, _home, _until_answers, free_port
from faststream_sqla import MessageState, SqlaBroker
from faststream_sqla.drivers.postgresql.driver import DEAF_WARNING
from faststream_sqla.schema import QueueTables
from tests.features.wakeups.test_local_and_notify import NO_POLLING
from tests.support.helpers import (
    FAST,
    Recorder,
    captured_logger,
    rows,
    run_python,
    run_script,
    wait_until,
)

pytestmark = pytest.mark.databases("postgresql")

#: as docs/production.md tells users to write it
POOLER_OPTION = "statement_cache_size=0"
#: server connections per database: in transaction mode fewer than the broker's pool
#: has clients, so clients share them; in session mode each client keeps its own
SERVER_CONNECTIONS = {"transaction": 2, "session": 30}


class PgBouncer:
    """A PgBouncer of its own on a free port, run as the `postgres` user (it refuses
    root), forwarding every database to the server of `server_url`."""

    def __init__(self, server_url: sa.URL, pool_mode: str) -> None:
        self.server = server_url
        self.pool_mode = pool_mode
        self.port = free_port()
        self.home = _home("postgres")
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        user = self.server.username or "postgres"
        (self.home / "users.txt").write_text(f'"{user}" ""\n')
        (self.home / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={self.server.host or '127.0.0.1'} port={self.server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.home / 'users.txt'}\n"
            f"pool_mode = {self.pool_mode}\ndefault_pool_size = {SERVER_CONNECTIONS[self.pool_mode]}\n"
            f"logfile = {self.home / 'pgbouncer.log'}\n"
            # asyncpg sets it at connect; PgBouncer must let it through
            "ignore_startup_parameters = extra_float_digits\n"
        )
        if os.geteuid() == 0:
            for name in ("users.txt", "pgbouncer.ini"):
                shutil.chown(self.home / name, "postgres", "postgres")
        executable = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        self.process = subprocess.Popen(
            _as("postgres", [executable, str(self.home / "pgbouncer.ini")]),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        await _until_answers(self.port)

    def url(self, postgres_url: sa.URL) -> str:
        """`postgres_url` through this PgBouncer, with the option a pooler needs."""
        through = postgres_url.set(host="127.0.0.1", port=self.port)
        return f"{through.render_as_string(hide_password=False)}?{POOLER_OPTION}"

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()  # by its own pid
            self.process.wait(timeout=30)
            self.process = None
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture
async def postgres_url(server_databases) -> AsyncIterator[sa.URL]:
    """This worker's PostgreSQL database, emptied of messages."""
    url = sa.make_url(server_databases["postgresql"])
    engine = create_async_engine(url)
    tables = QueueTables()
    async with engine.begin() as conn:
        for table in (tables.message, tables.archive, tables.controls):
            await conn.execute(table.delete())
    await engine.dispose()
    yield url


async def _pgbouncer(url: sa.URL, pool_mode: str) -> PgBouncer:
    bouncer = PgBouncer(url, pool_mode)
    try:
        await bouncer.start()
    except BaseException:
        bouncer.stop()
        raise
    return bouncer


@pytest.fixture
async def transaction_pooler(postgres_url) -> AsyncIterator[PgBouncer]:
    bouncer = await _pgbouncer(postgres_url, "transaction")
    yield bouncer
    bouncer.stop()


@pytest.fixture
async def session_pooler(postgres_url) -> AsyncIterator[PgBouncer]:
    bouncer = await _pgbouncer(postgres_url, "session")
    yield bouncer
    bouncer.stop()


# Another process publishes through the pooler as a producer service would.
PUBLISHER = """
import asyncio, json, sys
from faststream_sqla import SqlaBroker

async def main(url, first, count):
    async with SqlaBroker(url) as broker:
        for n in range(first, first + count, 50):
            await broker.publish_batch(*range(n, min(n + 50, first + count)), queue="orders")
        print(json.dumps({"published": count}))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


async def _publish_from_another_process(url: str, first: int, count: int) -> None:
    done = await run_python(PUBLISHER, url, str(first), str(count))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == {"published": count}


async def test_transaction_pooling_drains_every_message_by_polling(
    postgres_url, transaction_pooler
):
    url = transaction_pooler.url(postgres_url)
    logger, log = captured_logger("test.pgbouncer.transaction")
    broker = SqlaBroker(url, logger=logger)
    handled = Recorder()

    @broker.subscriber("orders", max_workers=8, **FAST)
    async def handle(body: int) -> None:
        handled.record(body)

    own, others = 300, 300
    async with broker:
        await broker.start()
        await broker.publish_batch(*range(own), queue="orders")
        for n in range(own, own + 20):  # one statement each, on shared server connections
            await broker.publish(n, queue="orders")
        listener = broker.notifications
        assert listener is not None
        await asyncio.wait_for(listener.checked.wait(), 60)
        # no notification can wake the subscriber now: only its polling finds these
        await _publish_from_another_process(url, own + 20, others)
        # the outbox, on an engine of the application's own, set up as the page says
        app_engine = create_async_engine(
            transaction_pooler.url(postgres_url).replace(f"?{POOLER_OPTION}", ""),
            connect_args={"statement_cache_size": 0, "prepared_statement_cache_size": 0},
        )
        outbox = own + 20 + others
        try:
            async with app_engine.begin() as conn:
                for n in range(outbox, outbox + 10):
                    await broker.publish(n, queue="orders", connection=conn)
        finally:
            await app_engine.dispose()
        total = outbox + 10
        await handled.wait_for(total, timeout=120)
        assert listener.hearing is False

        engine = create_async_engine(postgres_url)
        try:

            async def all_archived() -> bool:
                async with engine.connect() as conn:
                    count = await conn.scalar(
                        sa.select(sa.func.count()).select_from(QueueTables().archive)
                    )
                return count == total

            await wait_until(all_archived, timeout=60)
            archived = await rows(engine, QueueTables().archive)
        finally:
            await engine.dispose()

    assert sorted(handled.calls) == list(range(total))  # each once, none lost
    assert {(r["state"], r["attempts_count"]) for r in archived} == {
        (MessageState.COMPLETED, 1)
    }
    assert log.messages.count(DEAF_WARNING) == 1
    assert not [r for r in log.records if r.exc_info], "no statement failed"


async def test_admin_commands_work_through_transaction_pooling(postgres_url, transaction_pooler):
    url = transaction_pooler.url(postgres_url)
    async with SqlaBroker(url) as producer:
        await producer.publish_batch(*range(3), queue="orders")
    listed = await run_script(url, "queues", "--json")
    assert listed.returncode == 0, listed.stderr[-2000:]
    (orders,) = [q for q in json.loads(listed.stdout) if q["queue"] == "orders"]
    assert orders["ready"]["value"] == 3


async def test_session_pooling_keeps_notifications(postgres_url, session_pooler):
    url = session_pooler.url(postgres_url)
    broker = SqlaBroker(url)
    handled = Recorder()

    @broker.subscriber("orders", **NO_POLLING)  # only a notification wakes it
    async def handle(body: int) -> None:
        handled.record(body)

    async with broker:
        await broker.start()
        listener = broker.notifications
        assert listener is not None
        await asyncio.wait_for(listener.wait_connects(1), 60)
        assert listener.hearing is True
        await _publish_from_another_process(url, 0, 10)
        await handled.wait_for(10, timeout=60)
    assert sorted(handled.calls) == list(range(10))
