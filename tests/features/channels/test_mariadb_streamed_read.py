"""MariaDB's channel read with streamed walks (drivers/mysql/channel_claim.py): the walk
groups the keys index as it goes, with no bound on the entries it reads but the
server's own `LIMIT ROWS EXAMINED`; a read cut short by a channel's long backlog is made
again with the bounded walk, as are the queue's next reads for a while. Elsewhere the
read is the same whatever the backlog."""

from __future__ import annotations

import random

import pytest

from faststream_sqla import SqlaBroker
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.store import set_limits
from faststream_sqla.drivers.mysql import channel_claim

from tests.conftest import on_servers



async def publish_backlogs(database_url: str, backlogs: dict[str, int]) -> None:
    async with SqlaBroker(database_url) as broker:
        for channel, count in backlogs.items():
            await broker.publish_batch(
                *(f"{channel}:{i}" for i in range(count)), queue="work", channel=channel
            )


async def read(driver, engine, limit: int):
    async with driver.channel_session(engine) as session:
        return await session.read("work", limit)


async def test_a_long_backlog_does_not_hold_back_the_channels_beside_it(
    database_url, engine, driver, monkeypatch, caplog
):
    """Channel h has a long backlog and ten channels of two follow it. A claim of 20,
    one at a time per channel, takes the first message of each of the eleven: on
    MariaDB the streamed read meets h's backlog, is cut short, and the claim reads
    again with the bounded walk (and keeps it for the queue's next reads)."""
    # a streamed read may examine only a few rows here, far fewer than h's entries
    monkeypatch.setattr(channel_claim, "EXAMINED_PER_SCANNED", 0.1)
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    backlogs = {"h": 300, **{f"s{i}": 2 for i in range(10)}}
    await publish_backlogs(database_url, backlogs)
    claimed = await claim_channelled(driver, engine, "work", 20)
    assert sorted(m.payload.decode() for m in claimed) == sorted(
        f"{channel}:0" for channel in backlogs
    )
    claim = driver.channel_claim
    mariadb = bool(getattr(driver, "limits_rows_examined", False))
    assert mariadb == (driver.name == "mysql" and engine.dialect.is_mariadb)
    expected = {"work": channel_claim.BOUNDED_AFTER_CUT - 1} if mariadb else {}
    assert getattr(claim, "_bounded_reads", {}) == expected
    # the cut leaves a warning on the server, which the driver would fetch and log
    assert not [r for r in caplog.records if "ROWS EXAMINED" in r.getMessage()]
    if mariadb:
        # h still has its backlog: the next streamed read is cut too, and the bounded
        # reads after it are twice as many
        claim._bounded_reads["work"] = 0
        assert await claim_channelled(driver, engine, "work", 20) == []  # all in flight
        assert claim._bounded_reads == {"work": 2 * channel_claim.BOUNDED_AFTER_CUT - 1}


@pytest.mark.parametrize("dialect_name", on_servers("mysql"))
@pytest.mark.parametrize("seed", range(3))
async def test_a_streamed_read_sees_the_channels_a_bounded_one_does(
    database_url, engine, driver, seed
):
    """Backlogs of 1 to 30 messages on 60 channels: from any rotation, both walks list
    the same channels in the same order, with the same counts of live entries, except
    the bounded walk's last channel, whose entries may run past its range."""
    rng = random.Random(seed)
    await set_limits(driver, engine, "work", channel_max_concurrency=3)
    await publish_backlogs(database_url, {f"c{i:02d}": rng.randint(1, 30) for i in range(60)})
    claim = driver.channel_claim
    assert claim._streams
    for _ in range(6):
        claim._bounded_reads["work"] = 1  # the next read is bounded
        bounded_head, bounded = await read(driver, engine, 10)
        streamed_head, streamed = await read(driver, engine, 10)
        assert not bounded_head.streamed and streamed_head.streamed
        assert bounded_head.version == streamed_head.version
        walked = [(c.after_rotation, c.channel, c.keys_read) for c in bounded]
        seen = [(c.after_rotation, c.channel, c.keys_read) for c in streamed]
        assert [channel for _, channel, _ in seen[: len(walked)]] == [
            channel for _, channel, _ in walked
        ]
        assert seen[: len(walked) - 1] == walked[:-1]
        # move the rotation on, as claims do
        assert await claim_channelled(driver, engine, "work", 10)
