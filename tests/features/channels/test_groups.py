"""Groups of channels (faststream_sqla.channels.groups): the channels named
`tenant/...` share their group's limits, and the group takes one turn per round
however many of its channels are ready. On every database."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from faststream_sqla import SqlaBroker, SqlaMessage
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.channels import Rate
from faststream_sqla.channels.groups import group_of
from faststream_sqla.channels.plan import Member, share_out
from faststream_sqla.channels.store import set_limits
from faststream_sqla.exceptions import InvalidOptionError
from tests.support.channels import (
    Concurrency,
    assert_at_most_per_second,
    claim_times,
    measured,
)
from tests.support.helpers import FAST, Recorder


def test_a_channel_belongs_to_the_group_its_name_starts_with() -> None:
    assert group_of("acme/emails") == "acme/"
    assert group_of("acme/emails/eu") == "acme/"
    assert group_of("acme") is None
    assert group_of(None) is None


def test_a_group_takes_one_turn_a_round_however_many_channels_it_has() -> None:
    acme = Member("acme/")
    members = [Member(f"acme/{i:02}", group=acme) for i in range(50)]
    globex = Member("globex")
    given = share_out([*members, globex], 10, None, 0.0)
    assert given == 10
    assert globex.share == 5 and acme.share == 5
    # its turns go round its channels
    assert [m.share for m in members[:5]] == [1] * 5 and not any(m.share for m in members[5:])


def test_a_group_limit_holds_across_its_channels() -> None:
    acme = Member("acme/", max_concurrency=3, in_flight=1)
    members = [Member(f"acme/{i}", group=acme) for i in range(4)]
    initech = Member("initech/", rate=Rate(4, 1.0))
    others = [Member(f"initech/{i}", group=initech) for i in range(3)]
    assert share_out([*members, *others], 20, None, 0.0) == 6
    assert acme.share == 2 and initech.share == 4
    assert sum(m.share for m in members) == 2
    assert [m.share for m in others] == [2, 1, 1]
    paused = Member("p/", paused=True)
    assert share_out([Member("p/a", group=paused), Member("p/b", group=paused)], 5, None, 0) == 0


async def test_a_group_limit_holds_across_every_channel_of_the_group(
    database_url, engine, driver
):
    await set_limits(driver, engine, "work", "acme/", max_concurrency=2)
    broker = SqlaBroker(database_url)
    got = Recorder()
    seen = Concurrency()
    both_busy = asyncio.Event()

    async def handle(body: Any, msg: SqlaMessage) -> None:
        group = group_of(msg.channel) or msg.channel
        seen.enter(group)
        try:
            if seen.now.get("acme/") == 2 and seen.now.get("globex", 0) >= 3:
                both_busy.set()
            # the first handlers wait until the group is full and the other channel
            # has more, however slowly the machine claims
            await both_busy.wait()
            await asyncio.sleep(0.02)  # a handler doing I/O: overlap is possible
        finally:
            seen.leave(group)
        got.record((msg.channel, body))

    broker.subscriber("work", max_workers=8, **FAST)(handle)
    async with broker:
        await broker.start()
        for i in range(8):
            await broker.publish_batch(*range(4), queue="work", channel=f"acme/{i}")
        await broker.publish_batch(*range(8), queue="work", channel="globex")
        await got.wait_for(40)
    assert seen.peak["acme/"] == 2  # the group's limit, reached, across 8 channels
    assert seen.peak["globex"] > 2  # the rest of the workers went to the other channel
    assert seen.total_peak > 2


async def test_a_tenant_cannot_take_more_by_opening_channels(database_url, engine, driver):
    """A tenant with 20 channels of 10 messages, its group limited to 2 at a time, and
    a tenant with one channel of 10: the small tenant's ten are handled among the
    first 40, not one per round of the big tenant's 20 channels."""
    await set_limits(driver, engine, "work", "big/", max_concurrency=2)
    broker = SqlaBroker(database_url)
    order: list[str] = []
    small_done = asyncio.Event()

    async def handle(body: Any, msg: SqlaMessage) -> None:
        order.append(group_of(msg.channel) or "")
        if order.count("small/") == 10:
            small_done.set()

    broker.subscriber("work", max_workers=4, **FAST)(handle)
    async with broker:
        for i in range(20):
            await broker.publish_batch(*range(10), queue="work", channel=f"big/{i:02}")
        await broker.publish_batch(*range(10), queue="work", channel="small/only")
        await broker.start()
        await asyncio.wait_for(small_done.wait(), 60)
    last_small = max(i for i, name in enumerate(order) if name == "small/")
    assert last_small < 40, order[: last_small + 1]


async def test_a_group_rate_holds_across_its_channels(database_url, engine, driver):
    await set_limits(driver, engine, "work", "slow/", rate="5/s")

    async def publish(broker: SqlaBroker) -> None:
        for name in ("slow/a", "slow/b", "slow/c"):
            await broker.publish_batch(*range(4), queue="work", channel=name)

    assert_at_most_per_second(await claim_times(database_url, publish, 12), 5)


async def test_a_paused_group_stops_its_channels_only(make_broker, engine, tables):
    broker = make_broker()
    got, seen = measured(broker, max_workers=4, pause=0)
    async with QueueAdmin(engine) as admin, broker:
        await admin.pause_channel("work", "acme/")
        await broker.start()
        await broker.publish_batch(*range(3), queue="work", channel="acme/a")
        await broker.publish_batch(*range(3), queue="work", channel="globex")
        assert sorted(await got.wait_for(3)) == [("globex", 0), ("globex", 1), ("globex", 2)]
        listed = {c.name: c for c in await admin.channels("work")}
        assert listed["acme/"].paused and listed["acme/a"].ready == 3
        assert listed["acme/a"].group == "acme/" and listed["acme/"].effective_max_concurrency is None
        assert listed["acme/"].ready == 3  # a group's figures: its channels' together
        group = await admin.set_channel_limits("work", "acme/", max_concurrency=5)
        assert (group.name, group.ready, group.max_concurrency) == ("acme/", 3, 5)
        await admin.resume_channel("work", "acme/")
        await got.wait_for(6)


@pytest.mark.parametrize("name", ["acme/", "/"])
async def test_a_group_name_is_not_a_channel_to_publish_to(database_url, name):
    broker = SqlaBroker(database_url)
    async with broker:
        with pytest.raises(InvalidOptionError, match="is a group of channels"):
            await broker.publish("x", queue="work", channel=name)


async def test_a_channel_whose_messages_share_an_ordering_key_is_strictly_fifo(
    database_url, engine, driver
):
    """How channels and ordering keys compose (docs/flow-control.md#publishing-to-a-channel):
    with the channel's name as every message's ordering key, the channel runs one message
    at a time in publish order, its limit of 3 notwithstanding, and a failed message
    holds the ones behind it while it waits for its retry."""
    from faststream_sqla.retry import ConstantRetryStrategy

    await set_limits(driver, engine, "work", "acme", max_concurrency=3)
    broker = SqlaBroker(database_url)
    got = Recorder()
    seen = Concurrency()
    attempts: list[int] = []

    async def handle(body: int, msg: SqlaMessage) -> None:
        seen.enter(msg.channel)
        try:
            attempts.append(body)
            await asyncio.sleep(0.01)
            if body == 0 and attempts.count(0) == 1:
                raise RuntimeError("first attempt of the first message fails")
        finally:
            seen.leave(msg.channel)
        got.record(body)

    broker.subscriber(
        "work", max_workers=4,
        retry_strategy=ConstantRetryStrategy(delay_seconds=0.2, max_attempts=3), **FAST,
    )(handle)
    async with broker:
        await broker.start()
        await broker.publish_batch(*range(6), queue="work", channel="acme", ordering_key="acme")
        assert await got.wait_for(6) == [0, 1, 2, 3, 4, 5]
    assert attempts == [0, 0, 1, 2, 3, 4, 5]
    assert seen.peak["acme"] == 1
