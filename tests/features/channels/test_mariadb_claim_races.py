"""MariaDB's channel claim (take in the read's snapshot, then one UPDATE that checks
the version and marks the taken messages still ready) at its edges.
Other claimers act between the take and the marking; a row lock orders the two, as in
test_mysql_driver_path.py, with no sleep."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from faststream_sqla import SqlaBroker
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.store import set_limits
from faststream_sqla.clock import utc_now
from faststream_sqla.schema import BreakerState, MessageState

from tests.conftest import on_servers
from tests.support.helpers import due_channel_breaker, prepared_driver, wait_until



def _waiting(engine, statement_start: str):
    """Whether a statement starting so is running (waiting for a row lock)."""

    async def running() -> bool:
        async with engine.connect() as conn:
            found = await conn.exec_driver_sql(
                "SELECT count(*) FROM information_schema.processlist WHERE info LIKE %s",
                (statement_start + "%",),
            )
            return bool(found.scalar())

    return running


@pytest.mark.parametrize("dialect_name", on_servers("mysql"))
async def test_a_channel_claim_does_not_hand_out_a_message_that_went_round_meanwhile(
    database_url, engine, driver, tables
):
    """The take reads p1 (no channel) ready in the read's snapshot. Before the marking
    UPDATE reaches it, another claimer takes p1, its handler fails and p1 goes back
    RETRYABLE, due in an hour (net effect written under the row lock the marking waits
    for). p1 is ready again, but not as the take read it: the marking checks its claim
    token (and that it is due), so the claim neither hands it out with a stale token,
    whose outcome would be fenced out, nor an hour early."""
    await set_limits(driver, engine, "work", channel_max_concurrency=5)
    async with SqlaBroker(database_url) as broker:
        await broker.publish("a1", queue="work", channel="a")
        await broker.publish("p1", queue="work")
    m = tables.message
    async with engine.connect() as conn:
        p1 = await conn.scalar(sa.select(m.c.id).where(m.c.channel.is_(None)))
    async with engine.connect() as other:
        await other.execute(sa.select(m.c.id).where(m.c.id == p1).with_for_update())
        claim = asyncio.create_task(claim_channelled(driver, engine, "work", 10))
        await wait_until(_waiting(engine, "UPDATE message_controls AS c STRAIGHT_JOIN message"))
        # another claimer's claim of p1 and its failed attempt, retried in an hour
        await other.execute(
            sa.update(m)
            .where(m.c.id == p1)
            .values(
                state=MessageState.RETRYABLE,
                claims_count=m.c.claims_count + 1,
                deliveries_count=m.c.deliveries_count + 1,
                attempts_count=m.c.attempts_count + 1,
                next_attempt_at=utc_now(3600),
                acquired_at=None,
            )
        )
        await other.commit()
        claimed = await claim
    async with engine.connect() as conn:
        stored = dict((await conn.execute(sa.select(m.c.payload, m.c.claims_count))).all())
    handed = {m.payload: m.token for m in claimed}
    # every row handed out carries the token its outcome is fenced by
    assert handed == {body: stored[body] for body in handed}, (handed, stored)
    assert b"p1" not in handed  # due in an hour


@pytest.mark.parametrize("reset", ["rollback", None])
@pytest.mark.parametrize("dialect_name", on_servers("mysql"))
async def test_a_probe_missed_after_the_marking_leaves_nothing_marked(
    database_url, driver, tables, reset
):
    """The marking comes before the breaker's probe mark in the claim's transaction.
    When the probe mark finds the breaker changed (ProbeMissed), the marking must be
    undone: the claim's transaction rolls back before its connection goes back to the
    pool, so it holds even on an engine made with pool_reset_on_return=None, where
    the next statement on that connection would otherwise commit it (a message
    PROCESSING that no one holds)."""
    url = database_url
    engine = create_async_engine(url, pool_size=1, max_overflow=0, pool_reset_on_return=reset)
    try:
        d = await prepared_driver(engine)
        async with SqlaBroker(url) as broker:
            await broker.publish("x", queue="work", channel="acme")
        await d.channel_claim.create_queue_row(engine, "work")
        c, m = tables.controls, tables.message
        watcher = create_async_engine(url)
        try:
            await due_channel_breaker(
                watcher, tables, "work", "acme", BreakerState.OPEN, failures=3
            )
            async with watcher.connect() as other:
                # the flusher of another process holds the channel's breaker row
                await other.execute(
                    sa.select(c.c.queue)
                    .where(c.c.queue == "work", c.c.channel == "acme")
                    .with_for_update()
                )
                claim = asyncio.create_task(
                    claim_channelled(d, engine, "work", 1, channel_breakers=True)
                )
                await wait_until(_waiting(watcher, "UPDATE message_controls SET breaker_state"))
                # ... and opens it again for an hour: the probe is no longer due
                await other.execute(
                    c.update()
                    .where(c.c.queue == "work", c.c.channel == "acme")
                    .values(breaker_reopens_at=utc_now(3600))
                )
                await other.commit()
                assert await claim == []
            # the next transaction on the claim's connection (anything: a plain claim)
            assert await d.claim(engine, "work", 10) == []
            async with watcher.connect() as conn:
                state, deliveries = (
                    await conn.execute(sa.select(m.c.state, m.c.deliveries_count))
                ).one()
        finally:
            await watcher.dispose()
    finally:
        await engine.dispose()
    assert (state, deliveries) == (MessageState.PENDING.value, 0)
