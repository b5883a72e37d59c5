"""A queue's recent throughput, for the dashboard's sparklines: its messages archived
in each span of time, oldest span first, from bounded counts; bad spans are refused
before anything is read. On every database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from faststream_sqla import InvalidOptionError, SqlaBroker
from faststream_sqla.admin import Count, QueueAdmin

from tests.features.dashboard.conftest import fail


async def _archived_now(database_url, engine, driver, *, orders: int) -> None:
    """`orders` messages of the queue orders and one of billing archived now."""
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*(f"m{i}" for i in range(orders)), queue="orders")
        await broker.publish("other", queue="billing")
    await fail(driver, engine, "orders", orders)
    await fail(driver, engine, "billing", 1)


async def test_messages_archived_now_fall_in_the_last_span(database_url, engine, driver):
    await _archived_now(database_url, engine, driver, orders=3)
    async with QueueAdmin(database_url, exact_up_to=2) as capped, QueueAdmin(database_url) as admin:
        hour = await admin.throughput("orders")
        assert (hour.queue, hour.span_seconds, len(hour.archived)) == ("orders", 300, 12)
        assert hour.archived == [Count(0, exact=True)] * 11 + [Count(3, exact=True)]
        # the cap of every other count: "at least 2"
        (last,) = (await capped.throughput("orders", spans=1, span_seconds=60)).archived
        assert last == Count(2, exact=False)
        assert (await admin.throughput("never-used", spans=2)).archived == [Count(0, exact=True)] * 2


@pytest.mark.parametrize(
    ("options", "named"),
    [({"spans": 0}, "spans"), ({"spans": 121}, "spans"), ({"span_seconds": 0}, "span_seconds")],
)
async def test_bad_spans_are_refused(database_url, options, named):
    async with QueueAdmin(database_url) as admin:
        with pytest.raises(InvalidOptionError, match=named):
            await admin.throughput("orders", **options)


async def test_every_queues_throughput_is_one_statement(database_url, engine, driver):
    await _archived_now(database_url, engine, driver, orders=2)
    async with QueueAdmin(engine) as admin:
        await admin.queue_names()  # the schema checked: its reads are not counted below
        statements: list[str] = []

        def seen(conn, cursor, statement, *args) -> None:
            if "message_archive" in statement:
                statements.append(statement)

        sa.event.listen(engine.sync_engine, "before_cursor_execute", seen)
        try:
            every = await admin.throughputs(["orders", "billing", "never-used"], spans=3)
        finally:
            sa.event.remove(engine.sync_engine, "before_cursor_execute", seen)
        assert len(statements) == 1
        assert [(t.queue, [c.value for c in t.archived]) for t in every] == [
            ("orders", [0, 0, 2]),
            ("billing", [0, 0, 1]),
            ("never-used", [0, 0, 0]),
        ]
        assert every[0] == await admin.throughput("orders", spans=3)


async def test_many_queues_throughput_past_one_statements_columns(database_url):
    # 11 queues of 120 spans: more counts than one statement selects (SQLite's limit)
    names = [f"q{i}" for i in range(11)]
    async with QueueAdmin(database_url) as admin:
        every = await admin.throughputs(names, spans=120, span_seconds=60)
    assert [t.queue for t in every] == names
    assert all(t.archived == [Count(0, exact=True)] * 120 for t in every)
