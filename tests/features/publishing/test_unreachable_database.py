"""A publish that cannot reach the database raises DatabaseUnreachableError, with the
driver's own error chained, on every database."""

from __future__ import annotations

import shutil

import pytest
import sqlalchemy as sa

from faststream_sqla import DatabaseUnreachableError, SqlaBroker, SqlaBrokerError

from tests.support.helpers import TcpProxy, threads_finish_before_the_loop_closes


async def test_a_publish_to_an_unreachable_database_raises_one_typed_error(
    database_url, dialect_name, tmp_path
):
    url = sa.make_url(database_url)
    proxy: TcpProxy | None = None
    if dialect_name == "sqlite":
        # an embedded database is unreachable when its file cannot be opened
        home = tmp_path / "moved"
        home.mkdir()
        shutil.copy(url.database, home / "queue.db")
        url = url.set(database=str(home / "queue.db"))
    else:
        proxy = TcpProxy(url.host or "127.0.0.1", url.port or {"postgresql": 5432}.get(dialect_name, 3306))
        await proxy.start()
        url = url.set(host="127.0.0.1", port=proxy.port)

    broker = SqlaBroker(url)
    async with broker:
        await broker.connect()
        assert await broker.publish("before", queue="q")  # reachable: stored
        if proxy is not None:
            await proxy.cut()
        else:
            await broker.engine.dispose()  # the next publish opens the file again
            shutil.rmtree(home)
        # on SQLite, the failed open leaves a close queued on aiosqlite's thread
        async with threads_finish_before_the_loop_closes():
            with pytest.raises(DatabaseUnreachableError) as raised:
                await broker.publish("during", queue="q")
    assert isinstance(raised.value, SqlaBrokerError)
    assert isinstance(raised.value, ConnectionError)
    assert raised.value.__cause__ is not None  # the driver's own error, kept
    assert "cannot reach the database" in str(raised.value)
    assert "q" in str(raised.value)
    if url.password:
        assert url.password not in str(raised.value)
