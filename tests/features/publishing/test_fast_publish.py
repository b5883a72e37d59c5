"""fast_publish: PostgreSQL commits the broker's own publishes without waiting for the
WAL flush, for that transaction only; elsewhere it warns and changes nothing."""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from faststream_sqla import InvalidOptionError, SqlaBroker

from tests.support.helpers import rows

#: records the synchronous_commit in force for every inserted message row
SPY = (
    "CREATE TABLE commit_modes (message_id bigint, mode text)",
    """CREATE FUNCTION record_commit_mode() RETURNS trigger AS $$
    BEGIN
      INSERT INTO commit_modes VALUES (NEW.id, current_setting('synchronous_commit'));
      RETURN NEW;
    END $$ LANGUAGE plpgsql""",
    "CREATE TRIGGER record_commit_mode AFTER INSERT ON message"
    " FOR EACH ROW EXECUTE FUNCTION record_commit_mode()",
)
UNSPY = (
    "DROP TRIGGER IF EXISTS record_commit_mode ON message",
    "DROP FUNCTION IF EXISTS record_commit_mode()",
    "DROP TABLE IF EXISTS commit_modes",
)


async def run_all(engine, statements) -> None:
    async with engine.begin() as conn:
        for statement in statements:
            await conn.exec_driver_sql(statement)


async def test_fast_publish(database_url, engine, tables, dialect_name, caplog):
    if dialect_name == "postgresql":
        await relaxes_only_the_publish_transaction(database_url, engine)
    else:
        await warns_and_publishes_durably(database_url, engine, tables, caplog)


async def relaxes_only_the_publish_transaction(database_url, engine) -> None:
    await run_all(engine, UNSPY + SPY)
    try:
        fast = SqlaBroker(database_url, fast_publish=True, engine_options={"pool_size": 1})
        plain = SqlaBroker(database_url)
        async with fast, plain:
            await fast.connect()
            await plain.connect()
            relaxed_ids = [
                await fast.publish("fast", queue="q"),
                *await fast.publish_batch("a", "b", queue="q"),
            ]
            durable_id = await plain.publish("plain", queue="q")
            # the setting was local to the publish: the pooled connection is back to on
            async with fast.engine.connect() as conn:
                assert await conn.scalar(sa.text("SHOW synchronous_commit")) == "on"
        async with engine.connect() as conn:
            modes = dict((await conn.execute(sa.text("SELECT * FROM commit_modes"))).all())
        assert modes == {**{i: "off" for i in relaxed_ids}, durable_id: "on"}
    finally:
        await run_all(engine, UNSPY)


async def warns_and_publishes_durably(database_url, engine, tables, caplog) -> None:
    logger = logging.getLogger("test.fast_publish")
    broker = SqlaBroker(database_url, fast_publish=True, logger=logger)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        async with broker:
            await broker.connect()
            await broker.publish("x", queue="q")
    assert "fast_publish has no effect" in caplog.text
    assert len(await rows(engine, tables.message)) == 1


def test_fast_publish_must_be_a_bool() -> None:
    with pytest.raises(InvalidOptionError, match="fast_publish"):
        SqlaBroker("sqlite+aiosqlite:///:memory:", fast_publish="yes")  # type: ignore[arg-type]
