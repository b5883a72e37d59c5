"""A circuit breaker per channel (`circuit_breaker_per_channel`): a failing channel
stops alone while the queue's other channels go on; after its cooldown the channel
claim lets one probe through, across every process; the probe decides. On every
database."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from faststream_sqla import InvalidOptionError, SqlaBroker, SqlaMessage
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.schema import MessageState

from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until
from tests.support.cli import cli
from .test_queue_breaker import OPEN_PROBE_CLOSE, RETRY_SOON


async def channel_transitions(admin: QueueAdmin, queue: str, channel: str) -> list[tuple[str, str]]:
    history = await admin.breaker_history(queue, channel=channel)
    return [(t.from_state, t.to_state) for t in reversed(history)]


def channel_reached(admin: QueueAdmin, queue: str, channel: str, count: int):
    async def check() -> bool:
        return len(await channel_transitions(admin, queue, channel)) >= count

    return check


async def channel_breaker(admin: QueueAdmin, queue: str, channel: str):
    found = [b for b in await admin.breakers(queue) if b.channel == channel]
    return found[0] if found else None


async def completed(engine, tables, channel: str) -> int:
    archived = await rows(engine, tables.archive)
    return sum(
        1 for r in archived if r["channel"] == channel and r["state"] == MessageState.COMPLETED
    )


async def test_a_failing_channel_stops_alone_until_reset(database_url, engine, tables):
    logger, lines = captured_logger(f"channel-breaker-{database_url}")
    broker = SqlaBroker(database_url, logger=logger)
    calls = Recorder()
    healthy = {"good": True, "bad": False}

    @broker.subscriber(
        "calls", circuit_breaker_threshold=2, circuit_breaker_cooldown=3600,
        circuit_breaker_per_channel=True, retry_strategy=RETRY_SOON, max_workers=1, **FAST,
    )
    async def handle(body: str, msg: SqlaMessage) -> None:
        calls.record((msg.channel, body))
        if not healthy[msg.channel]:
            raise RuntimeError("downstream of this channel is down")

    m = tables.message
    async with QueueAdmin(engine) as admin, broker:
        await broker.start()
        await broker.publish_batch("b0", "b1", "b2", "b3", queue="calls", channel="bad")
        await wait_until(channel_reached(admin, "calls", "bad", 1))

        async def bad_settled() -> bool:
            async with engine.connect() as conn:
                return not await conn.scalar(
                    sa.select(sa.func.count()).where(
                        m.c.channel == "bad", m.c.state == MessageState.PROCESSING
                    )
                )

        await wait_until(bad_settled)
        # The queue's other channel is claimed and handled while "bad" is OPEN. A claim
        # that read the breaker before it opened may still take one "bad" message (it
        # is not PROCESSING until that claim commits): the handler runs one message at
        # a time, so it has been handled by the time ten "good" ones have.
        await broker.publish_batch(*(f"g{i}" for i in range(10)), queue="calls", channel="good")
        await wait_until(lambda: _at_least(completed(engine, tables, "good"), 10))
        bad_calls = sum(1 for channel, _ in calls.calls if channel == "bad")
        assert bad_calls >= 2  # the threshold; claims that read it before it opened add more

        # From here on, none of "bad" is claimed while its breaker is OPEN.
        await broker.publish_batch(*(f"h{i}" for i in range(10)), queue="calls", channel="good")
        await wait_until(lambda: _at_least(completed(engine, tables, "good"), 20))
        assert sum(1 for channel, _ in calls.calls if channel == "bad") == bad_calls
        # The open channel's messages wait: none failed, none archived.
        left = await rows(engine, m)
        assert sorted(r["payload"] for r in left) == [b"b0", b"b1", b"b2", b"b3"]
        assert all(r["state"] != MessageState.FAILED for r in left)

        status = await channel_breaker(admin, "calls", "bad")
        # the threshold, or more: failures of one written batch are counted together
        assert status.state == "OPEN" and 2 <= status.consecutive_failures <= bad_calls
        assert status.probe_holder is None and status.reopens_at is not None
        # The queue's own breaker counted none of it.
        (own,) = [b for b in await admin.breakers("calls") if b.channel is None]
        assert own.state == "CLOSED" and own.consecutive_failures == 0 and not own.recent
        assert not [b for b in await admin.breakers("calls") if b.channel == "good"]

        listed = json.loads((await cli(database_url, "breaker", "status", "--json")).stdout)
        assert [(b["queue"], b["channel"], b["state"]) for b in listed] == [
            ("calls", "bad", "OPEN")
        ]
        table = (await cli(database_url, "breaker", "status", "calls")).stdout
        assert "bad" in table and "channel 'bad' of queue 'calls'" in table

        healthy["bad"] = True
        reset = await cli(database_url, "breaker", "reset", "calls", "--channel", "bad")
        assert "Circuit breaker of channel 'bad' of queue 'calls' reset" in reset.stdout
        await wait_until(lambda: _at_least(completed(engine, tables, "bad"), 4))
        assert (await channel_transitions(admin, "calls", "bad")) == [
            ("CLOSED", "OPEN"), ("OPEN", "CLOSED")
        ]
        again = await cli(database_url, "breaker", "reset", "calls", "--channel", "bad", "--json")
        assert json.loads(again.stdout) == {
            "queue": "calls", "channel": "bad", "state": "CLOSED", "changed": False
        }
    assert lines.containing("circuit breaker of channel 'bad' of queue 'calls' is OPEN after")
    bad = await cli(database_url, "breaker", "reset", "calls", "--channel", "", code=2)
    assert "channel" in bad.output and len(bad.output.strip().splitlines()) == 1


async def _at_least(count, wanted: int) -> bool:
    return await count >= wanted


async def test_processes_share_a_channel_breaker_and_its_one_probe(database_url, engine, tables):
    """Two processes, two workers each: while the channel's breaker is HALF_OPEN exactly
    one message runs (the probe, whichever process claimed it), and its outcome
    decides."""
    brokers = [SqlaBroker(database_url) for _ in range(2)]
    probes: list[int | None] = []
    calls = Recorder()

    async with QueueAdmin(engine) as admin:

        async def handle(body: str, msg: SqlaMessage) -> None:
            status = await channel_breaker(admin, "shared", "tenant")
            state = "CLOSED" if status is None else status.state
            latest = status.recent[0].id if status is not None and status.recent else None
            calls.record((state, latest))
            if state == "HALF_OPEN":
                probes.append(latest)
            if len(probes) < 2:  # down until the second probe
                raise RuntimeError("down")

        for broker in brokers:
            broker.subscriber(
                "shared", circuit_breaker_threshold=2, circuit_breaker_cooldown=1.0,
                circuit_breaker_per_channel=True, retry_strategy=RETRY_SOON, max_workers=2,
                **FAST,
            )(handle)
        try:
            for broker in brokers:
                await broker.start()
            await brokers[0].publish_batch(
                *(f"m{i}" for i in range(6)), queue="shared", channel="tenant"
            )
            await wait_until(channel_reached(admin, "shared", "tenant", 5))
            await wait_until(lambda: _at_least(completed(engine, tables, "tenant"), 6))
        finally:
            for broker in brokers:
                await broker.stop()

        assert await channel_transitions(admin, "shared", "tenant") == OPEN_PROBE_CLOSE
        reasons = [
            t.reason for t in reversed(await admin.breaker_history("shared", channel="tenant"))
        ]
        # two failures or more: failures of one written batch are counted together
        assert reasons[0].endswith(" consecutive failures")
        assert reasons[1:] == [
            "cooldown over", "probe failed", "cooldown over", "probe succeeded"
        ]
        # one handler per HALF_OPEN period, across both processes
        assert len(probes) == 2 and len(set(probes)) == 2
        # CLOSED with no failures: a channel's breaker is no longer listed
        assert await channel_breaker(admin, "shared", "tenant") is None
    assert not await rows(engine, tables.message)


async def test_a_probe_that_ends_without_a_verdict_is_followed_by_another(
    database_url, engine, tables
):
    """A probe that defers spends no attempt, so it says nothing of the downstream:
    the breaker stays HALF_OPEN with no other probe until a cooldown has passed, then
    the next probe (the deferred message itself, due again) decides."""
    broker = SqlaBroker(database_url)
    calls = Recorder()

    async with QueueAdmin(engine) as admin:

        @broker.subscriber(
            "jobs", circuit_breaker_threshold=1, circuit_breaker_cooldown=1.0,
            circuit_breaker_per_channel=True, retry_strategy=RETRY_SOON, **FAST,
        )
        async def handle(body: str, msg: SqlaMessage) -> None:
            status = await channel_breaker(admin, "jobs", "tenant")
            state = "CLOSED" if status is None else status.state
            calls.record(state)
            # down until probed: a retry claimed before the opening was counted may
            # find the breaker CLOSED, or already OPEN
            if state != "HALF_OPEN":
                raise RuntimeError("down")
            if calls.calls.count("HALF_OPEN") == 1:
                await msg.defer()  # the first probe says nothing

        async with broker:
            await broker.start()
            await broker.publish("job", queue="jobs", channel="tenant")
            await wait_until(channel_reached(admin, "jobs", "tenant", 4))
            await wait_until(lambda: _at_least(completed(engine, tables, "tenant"), 1))

        assert calls.calls[0] == "CLOSED"
        assert calls.calls[-2:] == ["HALF_OPEN"] * 2 and calls.calls.count("HALF_OPEN") == 2
        history = list(reversed(await admin.breaker_history("jobs", channel="tenant")))
        assert [(t.from_state, t.to_state, t.reason) for t in history] == [
            ("CLOSED", "OPEN", "1 consecutive failures"),
            ("OPEN", "HALF_OPEN", "cooldown over"),
            ("HALF_OPEN", "HALF_OPEN", "probe ended without a verdict"),
            ("HALF_OPEN", "CLOSED", "probe succeeded"),
        ]
        # the second probe went a cooldown after the first, on the database's clock
        assert (history[2].at - history[1].at).total_seconds() >= 1.0


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"circuit_breaker_per_channel": True}, "circuit_breaker_per_channel needs"),
        (
            {"circuit_breaker_threshold": 3, "circuit_breaker_per_channel": "yes"},
            "circuit_breaker_per_channel must be True or False",
        ),
    ],
)
def test_the_per_channel_option_is_checked(options, says):
    broker = SqlaBroker("sqlite+aiosqlite:///unused.db")
    with pytest.raises(InvalidOptionError, match=says):
        broker.subscriber("q", **options)
