"""MySQL/MariaDB run the broker's own transactions on the pool's asyncmy connection
(`dialects/_asyncmy.py`): what that route must keep from SQLAlchemy's, and the round
trip it saves."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla.schema import QueueTables

from .helpers import claim_after_losing_the_connection, plain_message, prepared_dialect


@pytest.fixture
async def my_engine(server_databases):
    engine = create_async_engine(server_databases["mysql"], pool_size=1, max_overflow=0)
    tables = QueueTables()
    async with engine.begin() as conn:
        await conn.execute(tables.message.delete())
        await conn.execute(tables.archive.delete())
    yield engine
    await engine.dispose()


async def test_a_committed_transaction_is_checked_in_without_a_rollback(my_engine):
    dialect = await prepared_dialect(my_engine)
    resets: list[bool] = []

    @sa.event.listens_for(my_engine.sync_engine.pool, "reset")
    def _reset(_dbapi_connection, _record, state) -> None:
        resets.append(state.transaction_was_reset)

    (message_id,) = await dialect.insert_committed(my_engine, [plain_message()])
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
    dialect = await prepared_dialect(my_engine)
    await dialect.insert_committed(my_engine, [plain_message()])
    async with dialect._transaction(my_engine) as cursor:  # the one pooled connection
        await cursor.execute("SELECT CONNECTION_ID()", ())
        doomed = (await cursor.fetchall())[0][0]
    admin = create_async_engine(my_engine.url.render_as_string(hide_password=False))
    async with admin.connect() as conn:
        await conn.exec_driver_sql(f"KILL CONNECTION {int(doomed)}")
    await admin.dispose()

    assert len(await claim_after_losing_the_connection(dialect, my_engine, "q")) == 1
