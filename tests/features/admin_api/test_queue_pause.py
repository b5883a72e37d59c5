"""Pausing a queue: every consumer, in every process, stops claiming it within a few
seconds; what they hold is handled; resuming restarts them. On every database."""

from __future__ import annotations

import asyncio
import json

import sqlalchemy as sa

from faststream_sqla import InvalidQueueNameError, SqlaBroker, SqlaMessage
from faststream_sqla.admin import QueueAdmin

from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until
from tests.support.cli import cli


def _recording(got: Recorder, release: asyncio.Event):
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record((msg.queue, body))
        if body == "slow":
            await release.wait()

    return handle


def noticed(lines, text: str):
    async def check() -> bool:
        return bool(lines.containing(text))

    return check


async def test_pause_reaches_every_consumer_and_lets_running_handlers_finish(
    database_url, engine, tables
):
    release = asyncio.Event()
    handled: dict[str, Recorder] = {}
    brokers, logs = [], []
    for name in ("first", "second"):
        logger, lines = captured_logger(f"pause-{name}-{id(release)}")
        broker = SqlaBroker(database_url, logger=logger)
        handled[name] = Recorder()
        broker.subscriber(["work", "probe"], max_workers=2, **FAST)(
            _recording(handled[name], release)
        )
        brokers.append(broker)
        logs.append(lines)

    for broker in brokers:
        await broker.start()
    try:
        await brokers[0].publish("slow", queue="work")

        async def slow_started() -> bool:
            return any(("work", "slow") in got.calls for got in handled.values())

        await wait_until(slow_started)
        await cli(database_url, "queue", "pause", "work")
        for lines in logs:
            await wait_until(noticed(lines, "queue 'work' is paused"))

        # In flight when the pause came: it finishes and is archived as usual.
        release.set()

        async def slow_archived() -> bool:
            return [r["payload"] for r in await rows(engine, tables.archive)] == [b"slow"]

        await wait_until(slow_archived)

        # Published while paused: claim rounds go on (the probes come from the same
        # fetchers, in the same rounds) but pass the paused queue over.
        (held,) = await brokers[0].publish_batch("held", queue="work")
        await brokers[0].publish_batch(*(f"p{i}" for i in range(10)), queue="probe")

        async def probes_handled() -> bool:
            return sum(q == "probe" for got in handled.values() for q, _ in got.calls) == 10

        await wait_until(probes_handled)
        assert not any(("work", "held") in got.calls for got in handled.values())
        (waiting,) = await rows(engine, tables.message, tables.message.c.id == held)
        assert waiting["acquired_at"] is None and waiting["deliveries_count"] == 0

        async with QueueAdmin(engine) as admin:
            assert await admin.paused_queues() == ["work"]
            assert await admin.resume_queue("work") is True
        for lines in logs:
            await wait_until(noticed(lines, "queue 'work' is resumed"))

        async def held_handled() -> bool:
            return any(("work", "held") in got.calls for got in handled.values())

        await wait_until(held_handled)
    finally:
        release.set()
        for broker in brokers:
            await broker.stop()


async def test_queue_paused_before_start_is_never_claimed(database_url, engine, tables):
    async with QueueAdmin(engine) as admin:
        assert await admin.pause_queue("early") is True
        assert await admin.pause_queue("early") is False  # already paused
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(["early", "open"], **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        got.record(msg.queue)

    async with broker:
        # Published before the consumer starts: its very first claim must pass it over.
        await broker.publish("e", queue="early")
        await broker.publish("o", queue="open")
        await broker.start()
        assert await got.wait_for(1) == ["open"]
        async with QueueAdmin(engine) as admin:
            await admin.resume_queue("early")
        assert await got.wait_for(2) == ["open", "early"]


async def test_pause_commands(database_url, engine):
    listed = await cli(database_url, "queue", "paused")
    assert "No queue is paused." in listed.stdout
    paused = await cli(database_url, "queue", "pause", "reports")
    assert "Queue 'reports' paused" in paused.stdout
    again = json.loads((await cli(database_url, "queue", "pause", "reports", "--json")).stdout)
    assert again == {"queue": "reports", "paused": True, "changed": False}
    listed = json.loads((await cli(database_url, "queue", "paused", "--json")).stdout)
    assert listed == ["reports"]
    resumed = await cli(database_url, "queue", "resume", "reports")
    assert "Queue 'reports' resumed." in resumed.stdout
    assert "was not paused" in (await cli(database_url, "queue", "resume", "reports")).stdout

    bad = await cli(database_url, "queue", "pause", " ", code=2)
    assert "queue name must not be empty" in bad.output
    async with QueueAdmin(engine) as admin:
        try:
            await admin.pause_queue("")
        except InvalidQueueNameError:
            pass
        else:
            raise AssertionError("an empty queue name was accepted")
    async with engine.connect() as conn:
        assert await conn.scalar(sa.select(sa.func.count()).select_from(admin.tables.controls)) == 1
