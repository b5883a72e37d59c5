"""MySQL/MariaDB run the broker's own transactions on the pool's asyncmy connection
(`dialects/_asyncmy.py`): what that route must keep from SQLAlchemy's, and the round
trip it saves."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.dialects import dialect_for
from faststream_sqla.dialects.base import NewMessage, with_retries
from faststream_sqla.schema import QueueTables


@pytest.fixture
async def my_engine(server_databases):
    engine = create_async_engine(server_databases["mysql"], pool_size=1, max_overflow=0)
    tables = QueueTables()
    async with engine.begin() as conn:
        await conn.execute(tables.message.delete())
        await conn.execute(tables.archive.delete())
    yield engine
    await engine.dispose()


async def _dialect(engine):
    dialect = dialect_for(engine, QueueTables())
    dialect.configure_engine(engine, owned=False)
    await dialect.prepare(engine)
    return dialect


def _message() -> NewMessage:
    return NewMessage(queue="q", headers={}, headers_json="{}", payload=b"p",
                      correlation_id=None, publish_at=None, publish_delay=0.0)


async def test_a_committed_transaction_is_checked_in_without_a_rollback(my_engine):
    dialect = await _dialect(my_engine)
    resets: list[bool] = []

    @sa.event.listens_for(my_engine.sync_engine.pool, "reset")
    def _reset(_dbapi_connection, _record, state) -> None:
        resets.append(state.transaction_was_reset)

    (message_id,) = await dialect.insert_committed(my_engine, [_message()])
    assert resets == [True]  # already reset: no ROLLBACK sent
    resets.clear()
    with pytest.raises(sa.exc.ProgrammingError) as missing:
        async with dialect._transaction(my_engine) as cursor:
            await cursor.execute("SELECT * FROM no_such_table", ())
    assert resets == [False]  # after a failure, the pool's rollback ends it
    assert missing.value.orig.args[0] == 1146 and not missing.value.connection_invalidated
    with pytest.raises(sa.exc.IntegrityError):
        async with dialect._transaction(my_engine) as cursor:
            await cursor.execute(  # the same id again: a duplicate key
                "INSERT INTO message (id, queue, payload, state, attempts_count, "
                "deliveries_count, created_at, next_attempt_at) VALUES (%s, 'q', 'p', "
                "'PENDING', 0, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
                (message_id,),
            )
    rows = await dialect.claim(my_engine, "q", 10)  # the connection is still good
    assert [row[0] for row in rows] == [message_id]


async def test_a_killed_connection_is_dropped_and_the_retry_gets_a_fresh_one(my_engine):
    dialect = await _dialect(my_engine)
    await dialect.insert_committed(my_engine, [_message()])
    async with dialect._transaction(my_engine) as cursor:  # the one pooled connection
        await cursor.execute("SELECT CONNECTION_ID()", ())
        doomed = (await cursor.fetchall())[0][0]
    admin = create_async_engine(my_engine.url.render_as_string(hide_password=False))
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f"KILL CONNECTION {int(doomed)}")
    await admin.dispose()

    with pytest.raises(sa.exc.DBAPIError) as lost:
        await dialect.claim(my_engine, "q", 10)
    assert lost.value.connection_invalidated and dialect.is_disconnect(lost.value)
    rows = await with_retries(dialect, lambda: dialect.claim(my_engine, "q", 10))
    assert len(rows) == 1
