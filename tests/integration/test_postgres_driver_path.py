"""PostgreSQL runs claims and outcome writes on the pool's asyncpg connection itself
(`dialects/_asyncpg.py`): what that path must keep from SQLAlchemy's."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from faststream_sqla.dialects import dialect_for
from faststream_sqla.dialects._asyncpg import ConnectionLostError, DriverStatement, driver_connection
from faststream_sqla.dialects.base import NewMessage, with_retries
from faststream_sqla.schema import MessageState, QueueTables


@pytest.fixture
async def pg_engine(server_databases):
    # one pooled connection, so a test knows which connection the next checkout returns
    engine = create_async_engine(
        server_databases["postgresql"], poolclass=AsyncAdaptedQueuePool, pool_size=1, max_overflow=0
    )
    tables = QueueTables()
    async with engine.begin() as conn:
        await conn.execute(tables.message.delete())
        await conn.execute(tables.archive.delete())
    yield engine
    await engine.dispose()


def test_constants_are_converted_once_and_per_call_values_must_need_none():
    engine = create_async_engine("postgresql+asyncpg://u@h/d")
    t = QueueTables().message
    stmt = (
        sa.update(t)
        .where(t.c.queue == sa.bindparam("q"))
        .values(state=MessageState.PROCESSING)  # an Enum: converted by its type
    )
    compiled = DriverStatement(stmt, engine.dialect, per_call=("q",))
    assert "PROCESSING" in compiled.arguments({"q": "x"})
    assert "x" in compiled.arguments({"q": "x"})
    with pytest.raises(TypeError, match="'state' needs conversion"):
        DriverStatement(
            sa.update(t).values(state=sa.bindparam("state", type_=t.c.state.type)),
            engine.dialect,
            per_call=("state",),
        )
    with pytest.raises(TypeError, match=r"no parameters named \['missing'\]"):
        DriverStatement(stmt, engine.dialect, per_call=("q", "missing"))


async def test_a_killed_connection_is_dropped_and_the_retry_gets_a_fresh_one(pg_engine):
    dialect = dialect_for(pg_engine, QueueTables())
    dialect.configure_engine(pg_engine, owned=False)
    await dialect.prepare(pg_engine)
    await dialect.insert_committed(
        pg_engine,
        [NewMessage(queue="q", headers={}, headers_json="{}", payload=b"p", correlation_id=None,
                    publish_at=None, publish_delay=0.0)],
    )
    async with driver_connection(pg_engine) as conn:
        doomed = conn.get_server_pid()
    admin = create_async_engine(str(pg_engine.url.render_as_string(hide_password=False)))
    async with admin.connect() as conn:
        await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": doomed})
    await admin.dispose()

    # The pooled connection is dead: the first attempt fails as a lost connection...
    with pytest.raises(ConnectionLostError):
        await dialect.claim(pg_engine, "q", 10)
    assert dialect.is_disconnect(ConnectionLostError("x"))
    # ...and was dropped, so the next checkout is a new backend and the claim succeeds.
    rows = await with_retries(dialect, lambda: dialect.claim(pg_engine, "q", 10))
    assert len(rows) == 1
    async with driver_connection(pg_engine) as conn:
        assert conn.get_server_pid() != doomed
