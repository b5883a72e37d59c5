"""The per-channel breaker, groups and pulls at their edges: a breaker that changes
between a claim's read and its write, a breaker that recovered, a pull that comes
before a queue's first channelled message, a breaker no subscriber counts any more.
On every database."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

import faststream_sqla.channels.claim as claim_module
from faststream_sqla import SqlaBroker
from faststream_sqla.admin import controls
from faststream_sqla.drivers.controls import (
    BreakerChange,
    BreakerDecision,
    change_breaker,
    channels_counting,
)
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.drivers import driver_for
from faststream_sqla.schema import BreakerState, QueueTables
from faststream_sqla.subscriber.breaker import Attempt, decide_channel

from tests.support.helpers import FAST, Recorder, due_channel_breaker



async def _breaker_row(engine, tables, queue: str, channel: str):
    c = tables.controls
    async with engine.connect() as conn:
        return (
            await conn.execute(
                sa.select(c.c.breaker_state, c.c.breaker_reopens_at).where(
                    c.c.queue == queue, c.c.channel == channel
                )
            )
        ).one()


def _in_a_thread(coro_factory) -> None:
    """Run a coroutine to completion on a loop of its own, blocking: another process
    acting between two steps of the claim."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(coro_factory())
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


async def test_a_verdict_between_read_and_write_abandons_the_probe(
    database_url, engine, driver, tables, monkeypatch
):
    """The channel's breaker is HALF_OPEN and its reopens_at has passed (the last probe
    ran longer than the cooldown, and failed). A claim reads it as 'may probe'; before
    its write, the flusher of the probe's process counts that failure: OPEN for an hour.
    The write finds the breaker no longer as it read it and abandons the claim: the
    message of the OPEN channel stays where it is."""
    async with SqlaBroker(database_url) as broker:
        await broker.publish("x", queue="work", channel="acme")
    await driver.channel_claim.create_queue_row(engine, "work")
    await due_channel_breaker(engine, tables, "work", "acme", BreakerState.HALF_OPEN, failures=2)

    async def verdict() -> None:
        other = create_async_engine(database_url)
        try:
            d = driver_for(other, QueueTables())
            d.configure_engine(other, owned=False)
            await d.prepare(other)
            await change_breaker(
                d,
                other,
                BreakerDecision(
                    "work",
                    lambda cur: BreakerChange(
                        BreakerState.OPEN, cur.failures + 1, opens=True, cooldown=3600,
                        reason="probe failed",
                    ),
                    channel="acme",
                ),
            )
        finally:
            await other.dispose()

    original = claim_module.plan
    calls = []

    def racing(head, candidates, limit, **options):
        planned = original(head, candidates, limit, **options)
        if not calls:
            calls.append(1)
            _in_a_thread(verdict)
        return planned

    monkeypatch.setattr(claim_module, "plan", racing)
    taken = await claim_channelled(driver, engine, "work", 1, channel_breakers=True)
    state, _ = await _breaker_row(engine, tables, "work", "acme")
    assert calls
    # An OPEN channel gets nothing; a claim that took its message must have marked the
    # breaker HALF_OPEN (the message is the probe).
    assert not taken or state == BreakerState.HALF_OPEN.value, (
        f"took {[m.channel for m in taken]} while the channel's breaker is {state}"
    )


async def test_a_channel_breaker_that_recovered_is_no_longer_counted(database_url, engine, driver):
    """After one failure and a success the channel's breaker is CLOSED with 0 failures:
    its healthy batches cost no locked transaction, and it is no longer listed."""

    def judge(attempts):
        return lambda current: decide_channel(current, attempts, threshold=5, cooldown=60)

    now = datetime(2024, 1, 1)
    await change_breaker(
        driver, engine, BreakerDecision("work", judge([(Attempt.FAILED, now)]), channel="acme")
    )
    _, after = await change_breaker(
        driver, engine, BreakerDecision("work", judge([(Attempt.SUCCEEDED, now)]), channel="acme")
    )
    assert after.state is BreakerState.CLOSED and after.failures == 0
    assert await channels_counting(driver, engine, "work", ["acme"]) == []
    async with engine.connect() as conn:
        listed = await controls.breaker_statuses(conn, driver.tables, None, 5)
    assert not [b for b in listed if b.channel == "acme"]


async def test_a_pull_finds_a_channelled_message_published_after_an_empty_pull(
    database_url,
):
    """A pull that finds no message without a channel reads the controls again, so a
    queue's first channelled message is found at once, not after the 2 s the controls
    are otherwise kept."""
    broker = SqlaBroker(database_url)
    sub = broker.subscriber("pull", **FAST)
    async with broker:
        await broker.start()
        assert await sub.get_one(timeout=0.05) is None
        await broker.publish("x", queue="pull", channel="acme")
        msg = await sub.get_one(timeout=1.0)
        assert msg is not None
        await msg.ack()


async def test_group_limits_hold_across_channels_outside_one_read(
    database_url, engine, driver
):
    """A group's in-flight count covers its channels that a claim does not read, and
    its rate window lasts from claim to claim."""
    from faststream_sqla.channels.store import set_limits

    await set_limits(driver, engine, "work", "acme/", max_concurrency=3)
    await set_limits(driver, engine, "work", "slow/", rate="2/60s")
    async with SqlaBroker(database_url) as broker:
        for i in range(30):
            await broker.publish_batch("a", "b", queue="work", channel=f"acme/{i:02}")
        for i in range(30):
            await broker.publish_batch("a", "b", queue="work", channel=f"slow/{i:02}")
        await broker.publish_batch(*range(5), queue="work", channel="plain")
    taken: list[str] = []
    for _ in range(80):
        taken += [m.channel for m in await claim_channelled(driver, engine, "work", 1)]
    assert sum(1 for ch in taken if ch.startswith("acme/")) == 3
    assert sum(1 for ch in taken if ch.startswith("slow/")) == 2
    assert taken.count("plain") == 5


async def test_a_subscriber_without_channel_breakers_ignores_them(
    database_url, engine, driver, tables
):
    """A channel's breaker left OPEN by `circuit_breaker_per_channel` subscribers binds
    only subscribers with that option, which count its probes: one without it (the
    option dropped on redeploy) claims the channel as usual, instead of one probe per
    cooldown that nothing would ever count."""
    await driver.channel_claim.create_queue_row(engine, "work")
    # opened 30 s ago with a 29 s cooldown: due now
    await due_channel_breaker(
        engine, tables, "work", "acme", BreakerState.OPEN, failures=2, changed_ago=30
    )
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber("work", max_workers=2, **FAST)
    async def handle(body: str) -> None:  # healthy
        got.record(body)

    async with broker:
        await broker.start()
        await broker.publish_batch("a", "b", "c", queue="work", channel="acme")
        await got.wait_for(1)
        # a healthy channel: the rest follow within a few seconds
        await got.wait_for(3, timeout=5)
