"""A channel claim's read made while the workers are busy (channels.read_ahead): used
only while the queue row's version and the read's age allow, never past a limit, and
its connection always given back. Reads are made ahead on PostgreSQL and MariaDB;
SQLite's part is that it makes none, and drains within its limits all the same."""

from __future__ import annotations

import asyncio

import pytest
import sqlalchemy as sa

from faststream_sqla import SqlaBroker
from faststream_sqla.channels import read_ahead
from faststream_sqla.channels.claim import claim_channelled
from faststream_sqla.channels.read_ahead import ReadAhead, ReadsAhead
from faststream_sqla.channels.store import set_limits
from faststream_sqla.schema import MessageState

from tests.conftest import on_servers
from tests.support.helpers import holds_a_transaction



@pytest.fixture(autouse=True)
def reads_stay_young(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read made ahead is used for a minute here, not 50 ms: on a busy host the read
    alone can take longer, and these tests say what happens to a read that may be
    used (the one test of an old read sets its own age)."""
    monkeypatch.setattr(read_ahead, "READ_AHEAD_MAX_AGE", 60.0)


async def publish(database_url: str, *channels: str) -> None:
    async with SqlaBroker(database_url) as broker:
        for i, channel in enumerate(channels):
            await broker.publish(f"{channel}{i}", queue="work", channel=channel)


def checked_out(engine) -> int:
    return engine.sync_engine.pool.checkedout()


async def states(engine, tables) -> list[str]:
    m = tables.message
    async with engine.connect() as conn:
        found = await conn.execute(sa.select(m.c.state).order_by(m.c.id))
        return [MessageState(state).value for state in found.scalars()]


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_claim_writes_from_the_read_made_ahead(database_url, engine, driver):
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await publish(database_url, "a", "b", "c")
    ahead = ReadAhead(driver, engine, "work", 10)
    claimed = await ahead.claim(10, channel_breakers=False)
    assert sorted(m.payload for m in claimed or ()) == [b"a0", b"b1", b"c2"]
    assert checked_out(engine) == 0  # its session ended with the write


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_read_made_before_another_claim_hands_out_nothing_past_a_limit(
    database_url, engine, driver, tables
):
    """The read sees channel a with room for one; another claim takes that one before
    the write: the version moved, so the read's plan writes nothing, and the claim that
    reads afresh sees a full."""
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await publish(database_url, "a", "a", "a")
    ahead = ReadAhead(driver, engine, "work", 10)
    await ahead.read_made()
    assert len(await claim_channelled(driver, engine, "work", 10)) == 1
    assert await ahead.claim(10, channel_breakers=False) is None
    assert await claim_channelled(driver, engine, "work", 10) == []
    assert await states(engine, tables) == ["PROCESSING", "PENDING", "PENDING"]
    assert checked_out(engine) == 0


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_an_old_read_is_closed_unused_and_the_claim_reads_afresh(
    database_url, engine, driver, monkeypatch
):
    monkeypatch.setattr(read_ahead, "READ_AHEAD_MAX_AGE", 0.0)
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await publish(database_url, "a", "b")
    closing: set[asyncio.Task[None]] = set()
    # expires at the loop's next turn, and closes in the background
    ahead = ReadAhead(driver, engine, "work", 10, closing)
    claimed = await claim_channelled(driver, engine, "work", 10, ahead=ahead)
    assert len(claimed) == 2  # from the fresh read
    while closing:
        await asyncio.wait(set(closing))
    assert checked_out(engine) == 0


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_read_that_saw_nothing_leaves_a_later_publish_to_a_fresh_read(
    database_url, engine, driver
):
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await driver.channel_claim.create_queue_row(engine, "work")
    ahead = ReadAhead(driver, engine, "work", 10)
    await ahead.read_made()
    await publish(database_url, "a")
    claimed = await claim_channelled(driver, engine, "work", 10, ahead=ahead)
    assert [m.payload for m in claimed] == [b"a0"]
    assert checked_out(engine) == 0


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_rate_is_charged_only_from_a_fresh_read(database_url, engine, driver, tables):
    """A rate window is charged at the read's clock: a read made earlier is not used."""
    await set_limits(driver, engine, "work", "a", rate="5/s")
    await publish(database_url, "a", "a")
    ahead = ReadAhead(driver, engine, "work", 10)
    assert await ahead.claim(10, channel_breakers=False) is None
    assert await states(engine, tables) == ["PENDING", "PENDING"]
    assert len(await claim_channelled(driver, engine, "work", 10)) == 2
    assert checked_out(engine) == 0


async def test_reads_ahead_are_made_where_the_session_holds_no_writer_lock(
    database_url, engine, driver, monkeypatch
):
    """SQLite's claim session holds the one writer lock from its read to its write: a
    read made ahead would hold it while the workers run. Elsewhere, once claims have
    come far enough apart, a claim that handed out messages reads for the next, and a
    fetcher stopping gives its read's connection back."""
    monkeypatch.setattr(read_ahead, "READ_AHEAD_MIN_GAP", 0.0)
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await publish(database_url, "a")
    if driver.name == "sqlite":
        with pytest.raises(ValueError, match="writer lock"):
            ReadAhead(driver, engine, "work", 8)
    reads = ReadsAhead(driver, engine)
    reads.claimed("work", 8)  # no gap between claims seen yet: no read
    assert reads.pending == {}
    assert reads.take("work") is None
    reads.claimed("work", 8)
    assert ("work" in reads.pending) == (driver.name != "sqlite")
    await reads.close()
    assert reads.pending == {} and checked_out(engine) == 0


async def test_a_channelled_drain_with_reads_ahead_keeps_every_limit(database_url, engine, driver):
    """The subscriber reads ahead between its claims; handlers count what runs at once
    per channel, which never passes its limit, and every message is handled once."""
    await set_limits(driver, engine, "work", channel_max_concurrency=2)
    channels = [f"c{i}" for i in range(10)]
    expected = sorted(f"{c}:{n}" for n in range(6) for c in channels)
    async with SqlaBroker(database_url) as broker:
        for n in range(6):
            for c in channels:
                await broker.publish(f"{c}:{n}", queue="work", channel=c)
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    handled: list[str] = []
    done = asyncio.Event()
    broker = SqlaBroker(database_url)

    @broker.subscriber("work", max_workers=16)
    async def handle(body: str) -> None:
        channel = body.split(":")[0]
        running[channel] = running.get(channel, 0) + 1
        most[channel] = max(most.get(channel, 0), running[channel])
        await asyncio.sleep(0)  # other workers start meanwhile
        running[channel] -= 1
        handled.append(body)
        if len(handled) == len(expected):
            done.set()

    async with broker:
        await broker.start()
        await asyncio.wait_for(done.wait(), 60)
    assert sorted(handled) == expected
    assert max(most.values()) <= 2
    # the reads made ahead ended with the subscriber: none holds a transaction open
    assert not await holds_a_transaction(engine, driver.name, database_url)


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_the_next_read_is_on_its_way_before_the_workers_start(
    database_url, engine, driver, monkeypatch
):
    """A claim starts the next one's read before it hands its messages out, so the
    database reads while the workers run them: every handler that runs while a read is
    pending finds it begun."""
    monkeypatch.setattr(read_ahead, "READ_AHEAD_MIN_GAP", 0.0)
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    channels = [f"c{i}" for i in range(8)]
    async with SqlaBroker(database_url) as broker:
        for n in range(5):
            for c in channels:
                await broker.publish(f"{c}:{n}", queue="work", channel=c)
    seen: list[bool] = []  # per handler with a read pending: had it begun?
    handled = 0
    done = asyncio.Event()
    broker = SqlaBroker(database_url)
    subscriber = broker.subscriber("work", max_workers=4)

    @subscriber
    async def handle(body: str) -> None:
        nonlocal handled
        pending = subscriber._fetcher.reads_ahead.pending.get("work")
        if pending is not None:
            seen.append(pending.began)
        handled += 1
        if handled == 40:
            done.set()

    async with broker:
        await broker.start()
        await asyncio.wait_for(done.wait(), 60)
    assert seen, "no claim read ahead"
    assert all(seen)


def payloads(rows) -> list[str]:
    return sorted(m.payload.decode() for m in rows or ())


@pytest.fixture
def reads_counted(driver, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queues of the channel reads made, in order."""
    made: list[str] = []
    claim = driver.channel_claim
    read_with = claim.read_with

    async def counted(queue, limit, run):
        made.append(queue)
        return await read_with(queue, limit, run)

    monkeypatch.setattr(claim, "read_with", counted)
    return made


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_read_made_ahead_serves_the_claim_after_it_too(
    database_url, engine, driver, reads_counted
):
    """It reads for two claims: the second writes from the channels the first left,
    those after its rotation, with no read of its own."""
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    channels = [f"c{i:02d}" for i in range(24)]
    await publish(database_url, *channels)
    first = ReadAhead(driver, engine, "work", 4, claims=2)
    assert payloads(await first.claim(4, channel_breakers=False)) == [
        f"c{i:02d}{i}" for i in range(4)
    ]
    assert first.left is not None
    second = ReadAhead(driver, engine, "work", 4, left=first.left)
    assert not second.reads
    assert payloads(await second.claim(4, channel_breakers=False)) == [
        f"c{i:02d}{i}" for i in range(4, 8)
    ]
    assert reads_counted == ["work"]
    assert checked_out(engine) == 0


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_the_claim_from_what_a_read_left_counts_the_claim_before_in_flight(
    database_url, engine, driver
):
    """The read saw nothing in flight; the claim after the one it served knows that
    claim's four are, and the queue's limit of six leaves it two."""
    await set_limits(driver, engine, "work", max_concurrency=6)
    await publish(database_url, *(f"c{i:02d}" for i in range(24)))
    first = ReadAhead(driver, engine, "work", 4, claims=2)
    assert len(await first.claim(4, channel_breakers=False) or ()) == 4
    assert first.left is not None
    second = ReadAhead(driver, engine, "work", 4, left=first.left)
    assert len(await second.claim(4, channel_breakers=False) or ()) == 2
    assert await claim_channelled(driver, engine, "work", 4) == []


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_what_a_read_left_is_not_used_after_another_claim(database_url, engine, driver):
    """Another claim between moves the version past the one the first claim wrote: the
    claim from what the read left writes nothing, and the next claim reads afresh."""
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await publish(database_url, *(f"c{i:02d}" for i in range(24)))
    first = ReadAhead(driver, engine, "work", 4, claims=2)
    assert len(await first.claim(4, channel_breakers=False) or ()) == 4
    assert first.left is not None
    assert payloads(await claim_channelled(driver, engine, "work", 4)) == [
        f"c{i:02d}{i}" for i in range(4, 8)
    ]
    second = ReadAhead(driver, engine, "work", 4, left=first.left)
    assert await second.claim(4, channel_breakers=False) is None
    assert payloads(await claim_channelled(driver, engine, "work", 4)) == [
        f"c{i:02d}{i}" for i in range(8, 12)
    ]
    assert checked_out(engine) == 0


def reads_under_way(driver, engine) -> ReadsAhead:
    """A fetcher's reads ahead after two claims: the gap between claims is known, and
    the next claim's read is on its way."""
    reads = ReadsAhead(driver, engine)
    reads.claimed("work", 4)
    assert reads.take("work") is None
    reads.claimed("work", 4)
    return reads


async def claims_of_four(reads: ReadsAhead, n: int) -> list[ReadAhead]:
    """`n` claims of four, each from the read ahead made for it, as a fetcher makes
    them; the reads they used."""
    used = []
    for _ in range(n):
        ahead = reads.take("work")
        assert ahead is not None
        used.append(ahead)
        assert len(await ahead.claim(4, channel_breakers=False) or ()) == 4
        reads.claimed("work", 4)
    return used


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_reads_ahead_hand_what_a_read_left_to_the_next_claim(
    database_url, engine, driver, monkeypatch, reads_counted
):
    """A fetcher's reads: after a claim from a read made ahead, the next claim's read
    ahead is what that read left, and after that one a read of its own again."""
    monkeypatch.setattr(read_ahead, "READ_AHEAD_MIN_GAP", 0.0)
    await set_limits(driver, engine, "work", channel_max_concurrency=1)
    await publish(database_url, *(f"c{i:02d}" for i in range(40)))
    reads = reads_under_way(driver, engine)
    used = await claims_of_four(reads, 3)
    assert [ahead.reads for ahead in used] == [True, False, True]
    assert reads_counted == ["work", "work"]
    await reads.close()
    assert checked_out(engine) == 0


@pytest.mark.parametrize("dialect_name", on_servers())
async def test_a_queue_of_few_channels_reads_for_one_claim_at_a_time(
    database_url, engine, driver, monkeypatch
):
    """A read for two claims that lists fewer channels than it asked for leaves the
    next claim nothing: the queue's next reads list channels for one claim, and go
    back to two once one of them finds as many as it asked for."""
    monkeypatch.setattr(read_ahead, "READ_AHEAD_MIN_GAP", 0.0)
    await set_limits(driver, engine, "work", channel_max_concurrency=100)
    await publish(database_url, *[f"c{i}" for i in range(6)] * 3)
    reads = reads_under_way(driver, engine)
    assert [ahead.claims for ahead in await claims_of_four(reads, 3)] == [2, 1, 1]
    # the next read was made before these: the one after it finds them
    await publish(database_url, *(f"d{i:02d}" for i in range(20)))
    assert [ahead.claims for ahead in await claims_of_four(reads, 3)] == [1, 1, 2]
    await reads.close()
    assert checked_out(engine) == 0
