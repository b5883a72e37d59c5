"""Channels: concurrency and rate limits enforced by the claim, and channels taking
turns, on every database (faststream_sqla.channels)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from faststream_sqla import SqlaBroker, SqlaMessage
from faststream_sqla.channels import Rate
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.plan import Member, share_out
from faststream_sqla.channels.store import set_limits
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.channels import (
    Concurrency,
    assert_at_most_per_second,
    claim_times,
    measured,
    running_handler,
)
from tests.support.helpers import FAST, Recorder, rows


async def test_channelled_messages_are_handled_and_carry_their_channel(
    make_broker, engine, tables
):
    broker = make_broker()
    got, seen = measured(broker, max_workers=4, pause=0)
    async with broker:
        await broker.start()
        await broker.publish_batch(*(f"a{i}" for i in range(5)), queue="work", channel="a")
        await broker.publish_batch(*(f"p{i}" for i in range(3)), queue="work")
        await broker.publish("b0", queue="work", channel="b")
        await got.wait_for(9)
    expected = [("a", f"a{i}") for i in range(5)] + [(None, f"p{i}") for i in range(3)]
    assert sorted(got.calls, key=str) == sorted([*expected, ("b", "b0")], key=str)
    archived = await rows(engine, tables.archive)
    assert {r["channel"] for r in archived} == {"a", "b", None}
    assert not await rows(engine, tables.message)


async def test_a_channel_never_runs_more_than_its_limit(make_broker, engine, driver):
    await set_limits(driver, engine, "work", "a", max_concurrency=2)
    await set_limits(driver, engine, "work", channel_max_concurrency=3)
    broker = make_broker()

    def both_full(seen: Concurrency) -> bool:
        return seen.now.get("a") == 2 and seen.now.get("b") == 3

    got, seen = measured(broker, max_workers=8, until=both_full)
    async with broker:
        await broker.start()
        await broker.publish_batch(*(f"a{i}" for i in range(20)), queue="work", channel="a")
        await broker.publish_batch(*(f"b{i}" for i in range(20)), queue="work", channel="b")
        await got.wait_for(40)
    assert seen.peak["a"] == 2  # the channel's own limit, reached
    assert seen.peak["b"] == 3  # the queue's default for its channels


async def test_the_queue_limit_holds_across_channels(make_broker, engine, driver):
    await set_limits(driver, engine, "work", max_concurrency=3)
    broker = make_broker()
    got, seen = measured(broker, max_workers=8, until=lambda seen: seen.total_now == 3)
    async with broker:
        await broker.start()
        for channel in "abcd":
            await broker.publish_batch(*range(6), queue="work", channel=channel)
        await broker.publish_batch(*range(6), queue="work")  # no channel: counted too
        await got.wait_for(30)
    assert seen.total_peak == 3


async def test_a_small_channel_is_served_beside_a_big_one(database_url, engine, driver):
    # 10,000 ready on A (limited to 2 at a time), then 10 on B: B does not wait for A.
    await set_limits(driver, engine, "work", "A", max_concurrency=2)
    broker = SqlaBroker(database_url)
    order: list[str] = []
    b_done = asyncio.Event()

    async def handle(body: Any, msg: SqlaMessage) -> None:
        order.append(msg.channel or "")
        if order.count("B") == 10:
            b_done.set()

    broker.subscriber("work", max_workers=8, **FAST)(handle)
    async with broker:
        for start in range(0, 10_000, 1000):
            await broker.publish_batch(*range(start, start + 1000), queue="work", channel="A")
        await broker.publish_batch(*range(10), queue="work", channel="B")
        await broker.start()
        await asyncio.wait_for(b_done.wait(), 60)
    last_b = max(i for i, name in enumerate(order) if name == "B")
    assert last_b < 100, order[: last_b + 1]


async def test_a_rate_limited_channel_starts_at_most_its_rate(database_url, engine, driver):
    await set_limits(driver, engine, "work", "slow", rate="5/s")

    async def publish(broker: SqlaBroker) -> None:
        await broker.publish_batch(*range(12), queue="work", channel="slow")

    claimed_at = await claim_times(database_url, publish, 12)
    assert_at_most_per_second(claimed_at, 5)
    # the rate is a ceiling, not a stall: 12 starts took a little over two periods
    assert claimed_at[-1] - claimed_at[0] >= timedelta(seconds=2)


async def test_limits_change_while_workers_run(make_broker, engine, driver):
    await set_limits(driver, engine, "work", "a", max_concurrency=1)
    broker = make_broker()
    got, seen = Recorder(), Concurrency()
    raised = False
    four_at_once = asyncio.Event()

    @broker.subscriber("work", max_workers=8, **FAST)
    async def handle(body: Any, msg: SqlaMessage) -> None:
        seen.enter(msg.channel)
        try:
            if seen.now["a"] >= 4:
                four_at_once.set()
            if raised:  # held until the new limit is reached, however slow the claims
                await four_at_once.wait()
            else:
                await asyncio.sleep(0.05)  # work that gives others the time to overlap
        finally:
            seen.leave(msg.channel)
        got.record(body)

    async with broker:
        await broker.start()
        await broker.publish_batch(*range(10), queue="work", channel="a")
        await got.wait_for(3)
        assert seen.peak["a"] == 1
        raised = True
        await set_limits(driver, engine, "work", "a", max_concurrency=4)
        await broker.publish_batch(*range(40), queue="work", channel="a")
        await got.wait_for(50)
    assert four_at_once.is_set()
    assert seen.peak["a"] == 4  # reached, never passed


async def test_a_paused_channel_waits_and_the_others_go_on(database_url, engine, driver, tables):
    await set_limits(driver, engine, "work", "held", paused=True)
    broker = SqlaBroker(database_url)
    got = Recorder()
    broker.subscriber("work", max_workers=4, **FAST)(running_handler(got, Concurrency(), pause=0))
    async with broker:
        await broker.start()
        await broker.publish_batch(*range(3), queue="work", channel="held")
        await broker.publish_batch(*range(5), queue="work", channel="free")
        await got.wait_for(5)
        assert {channel for channel, _ in got.calls} == {"free"}
        await set_limits(driver, engine, "work", "held", paused=False)
        await got.wait_for(8)
    left = await rows(engine, tables.message)
    assert not left


@pytest.mark.parametrize(
    ("limits", "error"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be from 1"),
        ({"max_concurrency": "many"}, "max_concurrency must be a whole number"),
        ({"rate": "5 per second"}, "a rate must look like"),
        ({"rate": "0/s"}, "a rate's count must be from 1"),
        ({"rate": "5/1ms"}, "a rate's period must be from"),
        ({"channel_rate": "5/s", "channel": "a"}, "are a queue's defaults"),
    ],
)
async def test_bad_limits_are_refused_before_anything_is_written(
    engine, driver, tables, limits, error
):
    limits = dict(limits)
    channel = limits.pop("channel", "")
    with pytest.raises(InvalidOptionError, match=error):
        await set_limits(driver, engine, "work", channel, **limits)
    async with engine.connect() as conn:
        assert not (await conn.execute(sa.select(tables.controls))).all()


async def test_a_bad_channel_name_is_refused_at_publish(database_url, engine, tables):
    async with SqlaBroker(database_url) as broker:
        for bad, error in (("", "channel must be 1 to"), ("x" * 256, "channel must be 1 to")):
            with pytest.raises(InvalidOptionError, match=error):
                await broker.publish("m", queue="work", channel=bad)
    assert not await rows(engine, tables.message)


def test_shares_go_round_one_message_a_turn() -> None:
    members = [Member("a", max_concurrency=1), Member("b"), Member("c", paused=True), Member("d")]
    given = share_out(members, 6, None, 0.0)
    assert given == 6
    assert [m.share for m in members] == [1, 3, 0, 2]
    members = [Member("a", rate=Rate(2, 1.0)), Member("b")]
    assert share_out(members, 3, 2, 0.0) == 2
    assert [m.share for m in members] == [1, 1]


handled_channelled = sa.Table(
    "handled_channelled",
    sa.MetaData(),
    sa.Column("channel", sa.String(20)),
    sa.Column("pid", sa.Integer),
    sa.Column("started_ns", sa.BigInteger),
    sa.Column("finished_ns", sa.BigInteger),
)


def peak_overlap(intervals: list[tuple[int, int]]) -> int:
    """The most intervals open at one instant (one that ends as another starts does
    not overlap it)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.slow
async def test_three_processes_of_eight_workers_never_exceed_a_channel_limit(
    database_url, engine, driver, tables, tmp_path
):
    import sys

    from tests.support.processes import WORKERS, run_until, started_together

    # 15 slots in all: more than one process's 8 workers, so the processes share them
    limits = {"a": 5, "b": 7, "c": 3}
    per_channel, processes = 80, 3
    async with engine.begin() as conn:
        await conn.run_sync(handled_channelled.metadata.drop_all)
        await conn.run_sync(handled_channelled.metadata.create_all)
    try:
        for channel, limit in limits.items():
            await set_limits(driver, engine, "channelled", channel, max_concurrency=limit)
        async with SqlaBroker(database_url, logger=None) as broker:
            for channel in limits:
                await broker.publish_batch(*range(per_channel), queue="channelled", channel=channel)
        logs = [tmp_path / f"channelled-{i}.log" for i in range(processes)]
        argv = (sys.executable, WORKERS / "channelled.py", database_url)
        async with started_together([argv] * processes, logs) as procs:

            async def all_handled() -> bool:
                async with engine.connect() as conn:
                    count = sa.select(sa.func.count()).select_from(handled_channelled)
                    return await conn.scalar(count) >= per_channel * len(limits)

            await run_until(procs, logs, all_handled, timeout=120)
        async with engine.connect() as conn:
            runs = (await conn.execute(sa.select(handled_channelled))).all()
        assert len(runs) == per_channel * len(limits), "a message was handled twice"
        # a process that frees a slot claims again at once, so it tends to keep its
        # share; the 15 slots outnumber one process's workers
        assert len({r.pid for r in runs}) >= 2, "the limits were not shared"
        peaks = {
            channel: peak_overlap(
                [(r.started_ns, r.finished_ns) for r in runs if r.channel == channel]
            )
            for channel in limits
        }
        assert all(peaks[channel] <= limit for channel, limit in limits.items()), peaks
        assert max(peaks.values()) > 1, peaks  # handlers of a channel did overlap
        assert await rows(engine, tables.message) == []
    finally:
        async with engine.begin() as conn:
            await conn.run_sync(handled_channelled.metadata.drop_all)


async def test_get_one_takes_channelled_messages_within_their_limits(database_url, engine, driver):
    await set_limits(driver, engine, "work", "a", max_concurrency=1)
    async with SqlaBroker(database_url) as broker:
        await broker.publish_batch("a1", "a2", queue="work", channel="a")
        subscriber = broker.subscriber("work")
        await subscriber.start()
        try:
            first = await subscriber.get_one(timeout=5)
            assert first is not None and first.channel == "a"
            # the channel's one slot is taken until the first is settled
            assert await subscriber.get_one(timeout=0.2) is None
            await first.ack()
            second = await subscriber.get_one(timeout=5)
            assert second is not None and await second.decode() == "a2"
            await second.ack()
        finally:
            await subscriber.stop()


async def test_get_one_follows_the_queue_limit_and_pause(database_url, engine, driver):
    """A pull claims as consumers with handlers do: on a queue with limits, within them
    (messages without a channel too), and nothing from a paused queue."""
    from faststream_sqla.admin import QueueAdmin

    await set_limits(driver, engine, "work", max_concurrency=1)
    async with SqlaBroker(database_url) as broker, QueueAdmin(engine) as admin:
        await broker.publish_batch("p1", "p2", queue="work")  # no channel
        pulling = broker.subscriber("work")
        await pulling.start()
        try:
            first = await pulling.get_one(timeout=5)
            assert first is not None and first.channel is None
            # the queue's one slot is taken until the first is settled
            assert await pulling.get_one(timeout=0.2) is None
            await first.ack()
        finally:
            await pulling.stop()

        await admin.pause_queue("work")
        paused = broker.subscriber("work")
        await paused.start()
        try:
            assert await paused.get_one(timeout=0.2) is None
        finally:
            await paused.stop()

        await admin.resume_queue("work")
        resumed = broker.subscriber("work")
        await resumed.start()
        try:
            second = await resumed.get_one(timeout=5)
            assert second is not None and await second.decode() == "p2"
            await second.ack()
        finally:
            await resumed.stop()


async def test_the_test_client_carries_the_channel() -> None:
    from faststream_sqla import TestSqlaBroker

    broker = SqlaBroker("sqlite+aiosqlite:///:memory:")
    seen = []

    @broker.subscriber("work")
    async def handle(body: str, msg: SqlaMessage) -> None:
        seen.append((body, msg.channel))

    async with TestSqlaBroker(broker) as test_broker:
        await test_broker.publish("m", queue="work", channel="acme")
    assert seen == [("m", "acme")]


async def test_the_rotation_moves_past_channels_with_no_room(database_url, engine, driver):
    # More paused channels than one claim reads, named before the one free channel.
    for i in range(20):
        await set_limits(driver, engine, "work", f"p{i:02}", paused=True)
    async with SqlaBroker(database_url) as broker:
        for i in range(20):
            await broker.publish("held", queue="work", channel=f"p{i:02}")
        await broker.publish("free", queue="work", channel="zz")
    claimed = []
    for _ in range(10):  # each claim reads the limit plus 8 channels
        claimed += await claim_channelled(driver, engine, "work", 2)
        if claimed:
            break
    assert [m.channel for m in claimed] == ["zz"]


async def test_a_queue_goes_back_to_the_plain_claim_when_its_limits_go(engine, driver, tables):
    from faststream_sqla.drivers import controls

    await set_limits(driver, engine, "work", "a", max_concurrency=2, rate="5/s")
    await set_limits(driver, engine, "work", channel_rate="10/s")
    async with engine.connect() as conn:
        assert await controls.channelled_among(conn, tables, ["work"]) == {"work"}
    await set_limits(driver, engine, "work", "a", max_concurrency=None, rate=None)
    await set_limits(driver, engine, "work", channel_rate=None)
    async with engine.connect() as conn:
        assert await controls.channelled_among(conn, tables, ["work"]) == set()


async def test_claims_go_round_many_channels_and_wrap(database_url, engine, driver):
    """More channels than one claim reads, one of them longer than the read's range of
    entries: successive claims go round them in order, each channel's oldest message
    first, wrap to the start, and never exceed a channel's limit of one."""
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    names = [f"c{i:02}" for i in range(30)]
    async with SqlaBroker(database_url) as broker:
        for name in names:
            count = 300 if name == "c07" else 3  # c07 runs past the read's range
            await broker.publish_batch(
                *(f"{name}-{n}" for n in range(count)), queue="work", channel=name
            )
        await broker.publish_batch("p0", "p1", queue="work")
    claimed: list[tuple[str | None, bytes]] = []
    for _ in range(30):
        rows_ = await claim_channelled(driver, engine, "work", 4)
        if not rows_:
            break
        # a claim's rows come in no particular order; its channels are the next ones
        claimed += sorted(((m.channel, m.payload) for m in rows_), key=str)
    channelled = [(channel, body) for channel, body in claimed if channel is not None]
    # each channel once (its one slot stays taken), its oldest message, in name order
    assert channelled == [(name, f"{name}-0".encode()) for name in names]
    assert sorted(body for channel, body in claimed if channel is None) == [b"p0", b"p1"]


async def test_a_handled_message_frees_its_channel_slot_without_waiting_for_the_flush(
    database_url, engine, driver
):
    """Until its outcome is written, a handled message counts in flight and holds its
    channel's slot. A claim that comes back short of its idle workers has the outcomes
    waiting in the flusher written at once, and claims again once they are: with a
    minute's flush_interval and fetch interval, a channel of one message at a time
    still drains its backlog, in order."""
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    async with SqlaBroker(database_url) as publisher:
        await publisher.publish_batch(*(f"a{i}" for i in range(4)), queue="work", channel="a")
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(
        "work", max_workers=4, min_fetch_interval=0, max_fetch_interval=60, flush_interval=60
    )
    async def handle(body: str) -> None:
        got.record(body)

    async with broker:
        await broker.start()
        await got.wait_for(4, timeout=30)
    assert got.calls == ["a0", "a1", "a2", "a3"]
