"""The admin API (`faststream_sqla.admin`) on every database: figures, inspect, purge,
dead letters, redrive, replay and prune."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from faststream_sqla import (
    Envelope,
    InvalidOptionError,
    MessageState,
    SqlaBroker,
    UnknownMessageError,
    UnknownQueueError,
)
from faststream_sqla.admin import Count, QueueAdmin
from faststream_sqla.drivers.base import Outcome
from faststream_sqla.lifecycle import settled_unhandled
from tests.support.helpers import recording, rows

FAR = datetime(2099, 1, 1)


async def claim(driver, engine, queue, limit):
    return await driver.claim(engine, queue, limit)


async def fail(driver, engine, queue, n, error="ValueError: bad data\n  at line 3"):
    """Claim `n` messages of `queue` and archive them FAILED with `error`."""
    claimed = await claim(driver, engine, queue, n)
    outcomes = [settled_unhandled(m, MessageState.FAILED, error) for m in claimed]
    assert await driver.write_outcomes(engine, outcomes) == n
    return [m.id for m in claimed]


@pytest.fixture
async def admin(engine):
    async with QueueAdmin(engine) as admin:
        yield admin


async def test_queue_figures_count_each_state(database_url, engine, driver, admin):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(
            "a", "b", "c", Envelope("later", delay=3600),
            Envelope("head", ordering_key="k"), Envelope("behind", ordering_key="k"), "g",
            queue="q",
        )
    await claim(driver, engine, "q", 1)  # a: processing
    (b, c) = await claim(driver, engine, "q", 2)
    retry = Outcome(b.id, b.token, MessageState.RETRYABLE, 1, 1, next_attempt_at=FAR)
    failed = settled_unhandled(c, MessageState.FAILED, "boom")
    assert await driver.write_outcomes(engine, [retry, failed]) == 2

    (stats,) = await admin.queues()
    assert stats.queue == "q"
    assert (stats.ready, stats.scheduled, stats.processing, stats.retrying, stats.waiting) == (
        Count(2), Count(1), Count(1), Count(1), Count(1)  # head and g; later; a; b; behind
    )
    assert stats.failed_last_hour == Count(1)
    assert stats.handled_last_minute == Count(1)
    assert stats.oldest_ready_age is not None and stats.oldest_ready_age >= 0

    async with QueueAdmin(engine, exact_up_to=1) as capped:
        (stats,) = await capped.queues(["q"])
    assert stats.ready == Count(1, exact=False)  # at least one: the count stopped there
    assert str(stats.ready) == "1+"
    assert stats.scheduled.value + stats.retrying.value == 1  # one sample of the two
    assert not stats.scheduled.exact and not stats.retrying.exact
    with pytest.raises(UnknownQueueError, match="no queue 'nope'"):
        await admin.queues(["nope"])


async def test_queue_names_cover_every_state_and_the_archive(database_url, engine, driver, admin):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        for queue in ("ready", "in-flight", "archived-only"):
            await broker.publish("x", queue=queue)
        await broker.publish_batch(
            Envelope("1", ordering_key="k"), Envelope("2", ordering_key="k"), queue="keyed"
        )
    await claim(driver, engine, "in-flight", 1)
    await fail(driver, engine, "archived-only", 1)
    assert await admin.queue_names() == ["archived-only", "in-flight", "keyed", "ready"]


async def test_inspect_finds_live_and_archived_messages(database_url, engine, driver, admin):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        live = await broker.publish(
            {"order": 1}, queue="q", headers={"h": "v"}, correlation_id="c-1", priority=4,
            ordering_key="k", idempotency_key="once",
        )
        gone = await broker.publish("bye", queue="q2")
    await fail(driver, engine, "q2", 1, error="RuntimeError: nope")

    found = await admin.inspect(live)
    assert (found.queue, found.state, found.archived) == ("q", "PENDING", False)
    assert found.headers["h"] == "v" and found.payload == b'{"order":1}'
    assert (found.correlation_id, found.priority, found.ordering_key, found.idempotency_key) == (
        "c-1", 4, "k", "once"
    )
    assert found.created_at.tzinfo is not None and found.next_attempt_at is not None

    archived = await admin.inspect(gone)
    assert (archived.state, archived.archived, archived.last_error) == (
        "FAILED", True, "RuntimeError: nope"
    )
    assert archived.archived_at is not None and archived.next_attempt_at is None
    with pytest.raises(UnknownMessageError, match="no message 999999"):
        await admin.inspect(999999)
    with pytest.raises(InvalidOptionError, match="positive int"):
        await admin.inspect(0)


async def test_purge_deletes_waiting_messages_never_those_in_flight(
    database_url, engine, driver, admin, tables
):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(
            "in flight", "a", Envelope("later", delay=3600),
            Envelope("k1", ordering_key="k"), Envelope("k2", ordering_key="k"), queue="q",
        )
        await broker.publish("other queue", queue="other")
    (in_flight,) = await claim(driver, engine, "q", 1)
    seen: list[tuple[int, int | None]] = []
    assert await admin.purge("q", progress=lambda done, total: seen.append((done, total))) == 4
    assert seen[0] == (0, 4) and seen[-1] == (4, 4)
    left = await rows(engine, tables.message)
    assert [(r["id"], r["queue"]) for r in left] == [(in_flight.id, "q"), (left[1]["id"], "other")]
    here = tables.for_dialect(engine.dialect.name)
    if here.keys is not None:  # the key rows went with their messages
        assert await rows(engine, here.keys) == []
    with pytest.raises(UnknownQueueError):
        await admin.purge("never-seen")


async def test_dead_letters_page_and_summary(database_url, engine, driver, admin):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*[str(i) for i in range(5)], queue="a")
        await broker.publish_batch("x", "y", queue="b")
        await broker.publish("fine", queue="c")
    first = await fail(driver, engine, "a", 3, error="ValueError: bad\nTraceback ...")
    second = await fail(driver, engine, "a", 2, error="KeyError: 'id'")
    b_ids = await fail(driver, engine, "b", 2)
    (done,) = await claim(driver, engine, "c", 1)
    assert await driver.write_outcomes(
        engine, [Outcome(done.id, done.token, MessageState.COMPLETED, 1, 1)]
    ) == 1

    page = await admin.dead_letters(limit=4)
    assert len(page.items) == 4 and page.next_page is not None
    rest = await admin.dead_letters(limit=4, after=page.next_page)
    assert rest.next_page is None
    every = [d.id for d in page.items + rest.items]
    assert sorted(every) == sorted(first + second + b_ids)  # each once, never the completed
    assert [d.state for d in page.items] == ["FAILED"] * 4
    only_b = await admin.dead_letters(queue="b")
    assert sorted(d.id for d in only_b.items) == sorted(b_ids)
    with pytest.raises(InvalidOptionError, match="page token"):
        await admin.dead_letters(after="garbage")
    now = datetime.now(timezone.utc)
    with pytest.raises(InvalidOptionError, match="wrong way round"):
        await admin.dead_letters(since=now, until=now - timedelta(hours=1))
    assert (await admin.dead_letters(since=now + timedelta(hours=1))).items == []

    summary = {s.queue: s for s in await admin.dead_letter_summary()}
    assert set(summary) == {"a", "b"}
    assert summary["a"].count == Count(5)
    assert [(e.error, e.count) for e in summary["a"].common_errors] == [
        ("ValueError: bad", 3), ("KeyError: 'id'", 2)
    ]
    assert summary["a"].oldest <= summary["a"].newest


async def test_redrive_moves_dead_letters_back_with_an_audit_trail(
    make_broker, engine, driver, admin, tables
):
    broker = make_broker()
    got = recording(broker, "q")

    async with broker:
        await broker.connect()
        await broker.publish_batch(
            Envelope("keyed", ordering_key="k", idempotency_key="once", priority=3),
            "plain", "third", queue="q",
        )
        await broker.publish("elsewhere", queue="r")
        dead = await fail(driver, engine, "q", 3)
        await fail(driver, engine, "r", 1)

        result = await admin.redrive(ids=[dead[0]])
        (new_id,) = result.moved.values()
        moved = await admin.inspect(new_id)
        assert (moved.state, moved.attempts_count, moved.deliveries_count) == ("PENDING", 0, 0)
        assert (moved.ordering_key, moved.idempotency_key, moved.priority) == ("k", None, 3)
        assert moved.redriven_from == dead[0] and moved.payload == b"keyed"
        old = await admin.inspect(dead[0])
        assert (old.state, old.redriven_to, old.last_error) == (
            "REDRIVEN", new_id, "ValueError: bad data\n  at line 3"
        )
        with pytest.raises(InvalidOptionError, match=f"already moved back as message {new_id}"):
            await admin.redrive(ids=[dead[0]])
        with pytest.raises(InvalidOptionError, match="still queued"):
            await admin.redrive(ids=[new_id])
        with pytest.raises(UnknownMessageError):
            await admin.redrive(ids=[dead[1], 999999])  # nothing moves, not even dead[1]
        assert (await admin.inspect(dead[1])).state == "FAILED"

        rest = await admin.redrive(queue="q")
        assert sorted(rest.moved) == sorted(dead[1:])
        assert (await admin.redrive(all_queues=True)).moved.keys() != set()  # queue r's
        assert (await admin.redrive(all_queues=True)).moved == {}
        with pytest.raises(InvalidOptionError, match="exactly one"):
            await admin.redrive(queue="q", all_queues=True)
        await broker.start()
        assert sorted(await got.wait_for(3)) == ["keyed", "plain", "third"]


async def test_replay_takes_any_final_state_by_queue_and_time(database_url, engine, driver, admin):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch("ok", "bad", queue="q")
    (done,) = await claim(driver, engine, "q", 1)
    assert await driver.write_outcomes(
        engine, [Outcome(done.id, done.token, MessageState.COMPLETED, 1, 1)]
    ) == 1
    (failed,) = await fail(driver, engine, "q", 1)
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert (await admin.replay(queue="q", since=future)).moved == {}
    only_completed = await admin.replay(queue="q", states=["COMPLETED"])
    assert list(only_completed.moved) == [done.id]
    assert list((await admin.replay(queue="q")).moved) == [failed]
    with pytest.raises(InvalidOptionError, match="cannot replay state 'REDRIVEN'"):
        await admin.replay(queue="q", states=["REDRIVEN"])
    with pytest.raises(InvalidOptionError, match="exactly one"):
        await admin.replay()
    with pytest.raises(UnknownQueueError):
        await admin.replay(queue="none-such")


async def test_prune_deletes_only_old_archive_rows(database_url, engine, driver, admin, tables):
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*[str(i) for i in range(5)], queue="q")
    ids = await fail(driver, engine, "q", 5)
    a = tables.archive
    old = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(days=40)
    async with engine.begin() as conn:
        await conn.execute(sa.update(a).where(a.c.id.in_(ids[:3])).values(archived_at=old))
    assert await admin.prune_archive(timedelta(days=30), batch_size=2) == 3
    assert sorted(r["id"] for r in await rows(engine, a)) == sorted(ids[3:])
    with pytest.raises(InvalidOptionError, match="positive timedelta"):
        await admin.prune_archive(timedelta(0))


async def test_prune_runs_beside_draining_workers(
    database_url, make_broker, engine, driver, admin, tables
):
    """Prune's short transactions and the workers' archive writes do not get in each
    other's way: every message is handled and archived, and only the old rows go."""
    a = tables.archive
    async with SqlaBroker(database_url) as broker:
        await broker.connect()
        await broker.publish_batch(*[str(i) for i in range(300)], queue="old")
    old_ids = await fail(driver, engine, "old", 300)
    async with engine.begin() as conn:
        await conn.execute(
            sa.update(a).where(a.c.id.in_(old_ids)).values(archived_at=datetime(2020, 1, 1))
        )
    broker = make_broker()
    got = recording(broker, "live")

    async with broker:
        await broker.connect()
        await broker.publish_batch(*[str(i) for i in range(200)], queue="live")
        await broker.start()
        pruned = await admin.prune_archive(timedelta(days=30), batch_size=10)
        assert len(await got.wait_for(200)) == 200
    assert pruned == 300
    left = await rows(engine, a)
    assert len(left) == 200 and {r["queue"] for r in left} == {"live"}
