"""A queue's recent throughput, for the dashboard's sparklines: its messages archived
in each span of time, oldest span first, from bounded counts; bad spans are refused
before anything is read. On every database."""

from __future__ import annotations

import pytest

from faststream_sqla import InvalidOptionError, SqlaBroker
from faststream_sqla.admin import Count, QueueAdmin

from tests.features.dashboard.conftest import fail


async def test_messages_archived_now_fall_in_the_last_span(database_url, engine, driver):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*(f"m{i}" for i in range(5)), queue="orders")
        await broker.publish("other", queue="billing")
    await fail(driver, engine, "orders", 3)
    await fail(driver, engine, "billing", 1)
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
