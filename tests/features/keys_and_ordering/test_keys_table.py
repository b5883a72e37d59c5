"""Where the keys live: MySQL and MariaDB keep them in `<message>_keys`, which holds a
row per keyed message only; elsewhere the message table's partial indexes do that job.
Each test states what holds on every database (`tables.key_index` is the table the
keys are looked up in)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from faststream_sqla import Envelope, SqlaBroker
from faststream_sqla.migrations import (
    HEAD_REVISION,
    current_revision,
    downgrade_schema,
    upgrade_schema,
)
from tests.support.helpers import FAST, Recorder, recording, rows


async def test_only_keyed_messages_have_key_rows_and_settling_removes_them(
    database_url, make_broker, engine, tables, dialect_name
):
    tables = tables.for_dialect(engine.dialect.name)
    assert (tables.keys is not None) == (dialect_name == "mysql")
    broker = make_broker()
    got = recording(broker, "q")

    async with broker:
        await broker.connect()
        _, ordered, once, both = await broker.publish_batch(
            Envelope("plain"),
            Envelope("ordered", ordering_key="o"),
            Envelope("once", idempotency_key="i"),
            Envelope("both", ordering_key="o2", idempotency_key="i2"),
            queue="q",
        )
        if tables.keys is not None:
            keyed = await rows(engine, tables.keys)
            assert [(r["id"], r["ordering_key"], r["idempotency_key"]) for r in keyed] == [
                (ordered, "o", None), (once, None, "i"), (both, "o2", "i2")
            ]
        await broker.start()
        assert sorted(await got.wait_for(4)) == ["both", "once", "ordered", "plain"]
        await broker.stop()  # every outcome written
    assert await rows(engine, tables.key_index) == []
    # the keys are free again: the same key is a new message
    async with SqlaBroker(database_url) as again:
        await again.connect()
        assert await again.publish("once", queue="q", idempotency_key="i") > both


async def test_a_message_deleted_by_hand_does_not_hold_its_key(
    make_broker, engine, tables
):
    """On MySQL an operator's `DELETE FROM message` leaves the key row behind; the
    claim and the release then ignore a key row whose message is gone."""
    broker = make_broker()
    got = recording(broker, "q", release_stuck_interval=0.05)

    async with broker:
        await broker.connect()
        gone, _ = await broker.publish_batch(
            Envelope("gone", ordering_key="k"), Envelope("next", ordering_key="k"), queue="q"
        )
        async with engine.begin() as conn:
            await conn.execute(tables.message.delete().where(tables.message.c.id == gone))
        await broker.start()
        assert await got.wait_for(1) == ["next"]


async def test_upgrading_to_the_keys_table_keeps_queued_keys(engine, tables, dialect_name):
    """Revision 0009 copies the keys of queued messages into the new table (MySQL);
    elsewhere it changes nothing. Either way the keys still hold after the upgrade."""
    await downgrade_schema(engine, revision="0008")
    try:
        now = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)
        async with engine.begin() as conn:
            for body, ordering_key, idempotency_key in (
                (b"first", "k", "once"), (b"second", "k", None)
            ):
                await conn.execute(
                    sa.text(
                        "INSERT INTO message (queue, headers, payload, state, attempts_count, "
                        "deliveries_count, claims_count, priority, created_at, "
                        "next_attempt_at, ordering_key, idempotency_key) VALUES ('m', '{}', "
                        ":payload, :state, 0, 0, 0, 0, :now, :now, :ordering, :once)"
                    ),
                    {"payload": body, "now": now, "ordering": ordering_key,
                     "once": idempotency_key,
                     "state": "PENDING" if body == b"first" else "WAITING"},
                )
        await upgrade_schema(engine)
        assert await current_revision(engine) == HEAD_REVISION
        here = tables.for_dialect(engine.dialect.name)
        keyed = await rows(engine, here.key_index)
        assert [(r["ordering_key"], r["idempotency_key"]) for r in keyed] == [
            ("k", "once"), ("k", None)
        ]
        async with SqlaBroker(engine) as broker:
            await broker.connect()
            first = keyed[0]["id"]
            # the idempotency key is still held, and the ordering key still orders
            assert await broker.publish(b"first", queue="m", idempotency_key="once") == first
            got = Recorder()

            @broker.subscriber("m", **FAST)
            async def handle(body: bytes) -> None:
                got.record(body)

            await broker.start()
            assert await got.wait_for(2) == [b"first", b"second"]
    finally:
        await upgrade_schema(engine)
        async with engine.begin() as conn:
            for table in tables.for_dialect(engine.dialect.name).live:
                await conn.execute(table.delete())


async def test_the_start_up_check_wants_the_keys_table_where_there_is_one(
    database_url, engine, tables, dialect_name
):
    from faststream_sqla import SchemaMissingError

    here = tables.for_dialect(engine.dialect.name)
    if here.keys is None:  # PostgreSQL, SQLite: no keys table to want
        assert dialect_name != "mysql"
        async with SqlaBroker(database_url) as broker:
            await broker.connect()
        return
    async with engine.begin() as conn:
        await conn.exec_driver_sql("RENAME TABLE message_keys TO message_keys_away")
    try:
        with pytest.raises(SchemaMissingError, match="message_keys do not exist"):
            async with SqlaBroker(database_url) as broker:
                await broker.connect()
    finally:
        async with engine.begin() as conn:
            await conn.exec_driver_sql("RENAME TABLE message_keys_away TO message_keys")
