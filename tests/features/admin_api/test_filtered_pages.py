"""Filtered pages read a bounded window of rows: a filter that few rows match gives
short pages with a next page, never a read of the whole queue or archive, and
following the pages finds every match. On every database, with a small window."""

from __future__ import annotations

from faststream_sqla import Envelope, MessageState, SqlaBroker
from faststream_sqla.drivers.base import reading
from faststream_sqla.drivers.dead_letter_reads import DeadLetterPageQuery, newest_dead_letters
from faststream_sqla.drivers.message_reads import MessagePageQuery, message_page
from faststream_sqla.lifecycle import settled_unhandled

STATES = ("ready", "scheduled", "retrying", "processing", "waiting")


async def test_a_rare_channel_is_found_window_by_window(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        ids = await broker.publish_batch(
            *(Envelope(f"m{i}", channel="rare" if i in (1, 6) else None) for i in range(8)),
            queue="q",
        )
    found, seen_pages, after = [], 0, None
    while True:
        query = MessagePageQuery(
            tables, "q", STATES, 10, after, newest_first=True, channel="rare", window=3
        )
        async with reading(engine) as conn:
            page = await message_page(conn, query)
        seen_pages += 1
        found += [row.id for row in page.rows]
        if page.scanned_to is None:
            break
        after = page.scanned_to
    assert found == [ids[6], ids[1]]
    assert seen_pages == 3  # 8 rows, 3 a window: the last window is not full


async def test_a_rare_error_is_found_window_by_window(database_url, engine, driver, tables):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*(f"m{i}" for i in range(6)), queue="q")
    claimed = await driver.claim(engine, "q", 6)
    outcomes = [
        settled_unhandled(m, MessageState.FAILED, "Rare: x" if i == 4 else "Common: y")
        for i, m in enumerate(claimed)
    ]
    assert await driver.write_outcomes(engine, outcomes) == 6
    rare = claimed[4].id

    query = DeadLetterPageQuery(tables, ["q"], None, None, None, 10, error="Rare", window=2)
    found, pages = [], 0
    while True:
        async with reading(engine) as conn:
            read = await newest_dead_letters(conn, query)
        pages += 1
        found += [row.id for row in read.rows]
        if read.looked_to is None:
            break
        query = DeadLetterPageQuery(
            tables, ["q"], None, None, read.looked_to, 10, error="Rare", window=2
        )
    assert found == [rare] and pages >= 3
