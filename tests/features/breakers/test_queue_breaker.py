"""The circuit breaker: shared by every process through the database; it opens after
consecutive failures, lets one probe through after its cooldown, closes on the probe's
success; no message fails because it is open. On every database."""

from __future__ import annotations

import asyncio
import json

import pytest

from faststream_sqla import InvalidOptionError, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.drivers import controls
from faststream_sqla.clock import utc_now
from faststream_sqla.retry import ConstantRetryStrategy
from faststream_sqla.schema import MessageState
from faststream_sqla.subscriber.breaker import Breakers

from tests.support.helpers import FAST, Recorder, captured_logger, rows, wait_until
from tests.support.cli import cli

RETRY_SOON = ConstantRetryStrategy(delay_seconds=0.05, max_attempts=1000)


class Downstream:
    """What a handler calls: down until the `healthy_from`-th probe. The handler
    records, at entry, the breaker's state as the database holds it and the id of its
    latest transition (which tells one HALF_OPEN period from the next)."""

    def __init__(self, admin: QueueAdmin, queue: str, healthy_from: int) -> None:
        self.admin, self.queue, self.healthy_from = admin, queue, healthy_from
        self.calls = Recorder()
        self.probes = 0

    def handler(self, who: str = ""):
        async def handle(body: str) -> None:
            (status,) = await self.admin.breakers(self.queue)
            latest = status.recent[0].id if status.recent else None
            self.calls.record((who, body, status.state, latest))
            if status.state == "HALF_OPEN":
                self.probes += 1
            if self.probes < self.healthy_from:
                raise RuntimeError("downstream is down")

        return handle

    def states(self) -> list[str]:
        return [state for _, _, state, _ in self.calls.calls]

    def probe_periods(self) -> list[int]:
        return [latest for _, _, state, latest in self.calls.calls if state == "HALF_OPEN"]


async def transitions(admin: QueueAdmin, queue: str) -> list[tuple[str, str]]:
    history = await admin.breaker_history(queue)
    return [(t.from_state, t.to_state) for t in reversed(history)]


def reached(admin: QueueAdmin, queue: str, count: int):
    async def check() -> bool:
        return len(await transitions(admin, queue)) >= count

    return check


async def all_completed(engine, tables, count: int) -> bool:
    archived = await rows(engine, tables.archive)
    return len(archived) == count and all(
        r["state"] == MessageState.COMPLETED for r in archived
    )


OPEN_PROBE_CLOSE = [
    ("CLOSED", "OPEN"), ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "OPEN"),
    ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED"),
]


async def test_opens_after_consecutive_failures_probes_and_closes(database_url, engine, tables):
    logger, lines = captured_logger(f"breaker-one-{database_url}")
    broker = SqlaBroker(database_url, logger=logger)
    async with QueueAdmin(engine) as admin:
        downstream = Downstream(admin, "calls", healthy_from=2)
        broker.subscriber(
            "calls", circuit_breaker_threshold=3, circuit_breaker_cooldown=1.0,
            retry_strategy=RETRY_SOON, **FAST,
        )(downstream.handler())
        async with broker:
            await broker.publish_batch(*(f"m{i}" for i in range(5)), queue="calls")
            await broker.start()
            await wait_until(reached(admin, "calls", 5))
            await wait_until(lambda: all_completed(engine, tables, 5))

        assert await transitions(admin, "calls") == OPEN_PROBE_CLOSE
        states = downstream.states()
        # Three failures while CLOSED opened it; while the database said OPEN no handler
        # ran; each HALF_OPEN period let exactly one message through.
        assert states[:3] == ["CLOSED"] * 3
        assert "OPEN" not in states
        periods = downstream.probe_periods()
        assert len(periods) == 2 and len(set(periods)) == 2
        (status,) = await admin.breakers("calls")
        assert status.state == "CLOSED" and status.consecutive_failures == 0
        assert status.probe_holder is None
        reasons = [t.reason for t in reversed(await admin.breaker_history("calls"))]
        assert reasons == [
            "3 consecutive failures", "cooldown over", "probe failed", "cooldown over",
            "probe succeeded",
        ]
    assert lines.containing("circuit breaker of queue 'calls' is OPEN after 3 consecutive")
    assert not await rows(engine, tables.message)


async def test_processes_share_the_breaker_and_one_probe(database_url, engine, tables):
    brokers = {name: SqlaBroker(database_url) for name in ("first", "second")}
    async with QueueAdmin(engine) as admin:
        downstream = Downstream(admin, "shared", healthy_from=3)
        for name, broker in brokers.items():
            broker.subscriber(
                "shared", circuit_breaker_threshold=2, circuit_breaker_cooldown=0.5,
                retry_strategy=RETRY_SOON, max_workers=2, **FAST,
            )(downstream.handler(name))
        first, second = brokers.values()
        try:
            await first.start()
            await first.publish_batch(*(f"m{i}" for i in range(6)), queue="shared")
            await wait_until(reached(admin, "shared", 1))
            # The second process starts while the breaker is open: it reads the breaker
            # before its first claim.
            await second.start()
            await wait_until(reached(admin, "shared", 7))
            await wait_until(lambda: all_completed(engine, tables, 6))
        finally:
            for broker in brokers.values():
                await broker.stop()

        assert await transitions(admin, "shared") == [
            ("CLOSED", "OPEN"),
            ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "OPEN"),
            ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "OPEN"),
            ("OPEN", "HALF_OPEN"), ("HALF_OPEN", "CLOSED"),
        ]
        # Across both processes: no handler ran while it was OPEN, and each HALF_OPEN
        # period had exactly one handler call.
        assert "OPEN" not in downstream.states()
        periods = downstream.probe_periods()
        assert len(periods) == 3 and len(set(periods)) == 3
        holders = {t.reason for t in await admin.breaker_history("shared")}
        assert "probe holder silent" not in holders


async def test_buffered_messages_go_back_unstarted_when_it_opens(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(
        "buffered", circuit_breaker_threshold=1, circuit_breaker_cooldown=3600,
        retry_strategy=RETRY_SOON, **FAST,
    )
    async def handle(body: str) -> None:
        got.record(body)
        raise RuntimeError("down")

    async with QueueAdmin(engine) as admin, broker:
        # all ten are published first, so the first claim takes them all into the buffer
        await broker.publish_batch(*(f"m{i}" for i in range(10)), queue="buffered")
        await broker.start()
        await wait_until(reached(admin, "buffered", 1))

        async def none_held() -> bool:
            return all(r["acquired_at"] is None for r in await rows(engine, tables.message))

        await wait_until(none_held)
        live = await rows(engine, tables.message)
    assert got.calls == ["m0"]
    failed, *given_back = live
    assert failed["state"] == MessageState.RETRYABLE and failed["attempts_count"] == 1
    assert len(given_back) == 9
    for row in given_back:
        assert row["claims_count"] >= 1  # claimed into the buffer...
        # ...and given back unstarted: no attempt, no delivery spent
        assert row["state"] == MessageState.PENDING
        assert row["attempts_count"] == 0 and row["deliveries_count"] == 0
    assert not await rows(engine, tables.archive)


async def test_breaker_commands(database_url, engine, tables):
    assert json.loads((await cli(database_url, "breaker", "status", "--json")).stdout) == []
    listed = await cli(database_url, "breaker", "status")
    assert "No circuit breaker has counted a failure." in listed.stdout

    broker = SqlaBroker(database_url)
    healthy = False
    got = Recorder()

    @broker.subscriber(
        "flaky", circuit_breaker_threshold=1, circuit_breaker_cooldown=3600,
        retry_strategy=RETRY_SOON, **FAST,
    )
    async def handle(body: str) -> None:
        got.record(body)
        if not healthy:
            raise RuntimeError("down")

    async with QueueAdmin(engine) as admin, broker:
        await broker.start()
        await broker.publish("one", queue="flaky")
        await wait_until(reached(admin, "flaky", 1))

        (status,) = json.loads((await cli(database_url, "breaker", "status", "--json")).stdout)
        assert status["queue"] == "flaky" and status["state"] == "OPEN"
        assert status["consecutive_failures"] == 1 and status["probe_holder"] is None
        assert status["reopens_at"] is not None
        assert [(t["from_state"], t["to_state"], t["reason"]) for t in status["recent"]] == [
            ("CLOSED", "OPEN", "1 consecutive failures")
        ]
        table = (await cli(database_url, "breaker", "status", "flaky")).stdout
        assert "OPEN" in table and "CLOSED -> OPEN" in table

        healthy = True
        reset = await cli(database_url, "breaker", "reset", "flaky")
        assert "Circuit breaker of queue 'flaky' reset" in reset.stdout
        # Every process sees the reset within a watcher turn and claims again.
        assert await got.wait_for(2) == ["one", "one"]
        await wait_until(lambda: all_completed(engine, tables, 1))
        again = json.loads((await cli(database_url, "breaker", "reset", "flaky", "--json")).stdout)
        assert again == {"queue": "flaky", "channel": None, "state": "CLOSED", "changed": False}
        assert (await transitions(admin, "flaky"))[-1] == ("OPEN", "CLOSED")
        assert (await admin.breaker_history("flaky", limit=1))[0].reason == "manual reset"

    for args in (("reset", " "), ("status", "")):
        bad = await cli(database_url, "breaker", *args, code=2)
        assert "queue name must not be empty" in bad.output
        assert len(bad.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("circuit_breaker_threshold", 0, "circuit_breaker_threshold must be an integer from 1"),
        ("circuit_breaker_threshold", True, "circuit_breaker_threshold must be an integer"),
        ("circuit_breaker_cooldown", -1, "circuit_breaker_cooldown must be at least 0.1"),
        ("circuit_breaker_cooldown", 86401, "circuit_breaker_cooldown must be at least 0.1"),
    ],
)
def test_breaker_options_have_bounds(option, value, says):
    broker = SqlaBroker("sqlite+aiosqlite:///unused.db")
    with pytest.raises(InvalidOptionError, match=says):
        broker.subscriber("q", **{option: value})


async def test_a_stopping_holder_hands_its_probe_back(database_url, engine, tables):
    stuck = asyncio.Event()
    calls = Recorder()

    async def handle_first(body: str) -> None:
        calls.record(body)
        if len(calls.calls) == 1:
            raise RuntimeError("down")
        await stuck.wait()  # the probe: still running when its process stops

    first = SqlaBroker(database_url, graceful_timeout=0.2)
    first.subscriber(
        "handed", circuit_breaker_threshold=1, circuit_breaker_cooldown=0.1,
        retry_strategy=RETRY_SOON, **FAST,
    )(handle_first)
    second = SqlaBroker(database_url)
    done = Recorder()
    second.subscriber(
        "handed", circuit_breaker_threshold=1, circuit_breaker_cooldown=0.1,
        retry_strategy=RETRY_SOON, **FAST,
    )(lambda body: done.record(body))
    async with QueueAdmin(engine) as admin:
        await first.start()
        try:
            await first.publish("m", queue="handed")
            await calls.wait_for(2)  # failed, opened, and now the probe runs
            (status,) = await admin.breakers("handed")
            assert status.state == "HALF_OPEN" and status.probe_holder is not None
        finally:
            await first.stop()
        (status,) = await admin.breakers("handed")
        assert status.state == "OPEN" and status.probe_holder is None
        # The cancelled probe spent no attempt; another process probes at once, rather
        # than after the silent-holder timeout.
        (row,) = await rows(engine, tables.message)
        assert row["attempts_count"] == 1
        async with second:
            await second.start()
            assert await done.wait_for(1) == ["m"]
            await wait_until(lambda: all_completed(engine, tables, 1))
        reasons = [(t.to_state, t.reason) for t in reversed(await admin.breaker_history("handed"))]
    assert reasons == [
        ("OPEN", "1 consecutive failures"), ("HALF_OPEN", "cooldown over"),
        ("OPEN", "probe holder stopped"), ("HALF_OPEN", "cooldown over"),
        ("CLOSED", "probe succeeded"),
    ]


async def test_a_silent_probe_holder_is_replaced(database_url, engine, tables):
    # A holder that died: HALF_OPEN, held by an instance that has not shown itself for
    # an hour (as a killed process leaves it).
    c = tables.controls
    async with engine.begin() as conn:
        await conn.execute(c.insert().values(
            queue="orphaned", channel="", updated_at=utc_now(), breaker_state="HALF_OPEN",
            breaker_failures=5, breaker_changed_at=utc_now(-3600),
            breaker_reopens_at=utc_now(-3600), breaker_probe="gone:1:deadbeef",
        ))
    broker = SqlaBroker(database_url)
    got = Recorder()
    broker.subscriber(
        "orphaned", circuit_breaker_threshold=5, circuit_breaker_cooldown=0.1,
        release_stuck_timeout=0.5, **FAST,
    )(lambda body: got.record(body))
    async with QueueAdmin(engine) as admin, broker:
        await broker.publish_batch("a", "b", queue="orphaned")
        await broker.start()
        assert await got.wait_for(2) == ["a", "b"]
        history = [(t.from_state, t.to_state, t.reason)
                   for t in reversed(await admin.breaker_history("orphaned"))]
        (status,) = await admin.breakers("orphaned")
    assert history == [
        ("HALF_OPEN", "HALF_OPEN", "probe holder silent"),
        ("HALF_OPEN", "CLOSED", "probe succeeded"),
    ]
    assert status.state == "CLOSED" and status.consecutive_failures == 0


async def test_each_queue_has_its_own_breaker(database_url, engine, tables):
    broker = SqlaBroker(database_url)
    got = Recorder()

    @broker.subscriber(
        ["broken", "fine"], batch=True, circuit_breaker_threshold=2,
        circuit_breaker_cooldown=3600, retry_strategy=RETRY_SOON, **FAST,
    )
    async def handle(bodies: list[str]) -> None:
        queue = "broken" if bodies[0].startswith("b") else "fine"
        got.record((queue, bodies))
        if queue == "broken":
            raise RuntimeError("down")

    async with QueueAdmin(engine) as admin, broker:
        # one batch of three failing messages: three consecutive failures
        await broker.publish_batch("b1", "b2", "b3", queue="broken")
        await broker.start()
        await wait_until(reached(admin, "broken", 1))
        await broker.publish("f1", queue="fine")
        await got.wait_for(2)
        await wait_until(lambda: all_completed(engine, tables, 1))
        statuses = {s.queue: s for s in await admin.breakers()}
    assert got.calls == [("broken", ["b1", "b2", "b3"]), ("fine", ["f1"])]
    assert list(statuses) == ["broken"]  # "fine" never counted a failure
    assert statuses["broken"].state == "OPEN" and statuses["broken"].consecutive_failures == 3
    waiting = await rows(engine, tables.message)
    assert [(r["state"], r["attempts_count"]) for r in waiting] == [(MessageState.RETRYABLE, 1)] * 3


@pytest.mark.parametrize("held", ["by a silent holder", "by nobody after its cooldown"])
async def test_only_a_process_with_an_idle_worker_takes_the_probe(
    database_url, engine, driver, tables, held
):
    """A process whose workers are all busy would make the probe wait for the longest
    running handler, keeping the whole queue shut: it leaves the probe to another."""
    silent = held == "by a silent holder"
    async with engine.begin() as conn:
        await conn.execute(tables.controls.insert().values(
            queue="probed", channel="", updated_at=utc_now(),
            breaker_state="HALF_OPEN" if silent else "OPEN", breaker_failures=3,
            breaker_changed_at=utc_now(-3600), breaker_reopens_at=utc_now(-3600),
            breaker_probe="gone:1:deadbeef" if silent else None,
        ))
    idle = False
    breakers = Breakers(
        engine=engine, driver=driver, queues=["probed"], threshold=3, cooldown=1.0,
        silent_after=60.0, log=lambda *args, **kwargs: None, on_opened=lambda queue: None,
        wake=asyncio.Event(), has_idle_worker=lambda: idle,
    )

    async def watcher_turn() -> None:
        async with engine.connect() as conn:
            readings = await controls.controls_among(
                conn, tables, ["probed"], breakers.silent_after
            )
        await breakers.observe(readings, breakers.versions())

    async with QueueAdmin(engine) as admin:
        before = await admin.breakers("probed")
        await watcher_turn()  # every worker busy
        assert await admin.breakers("probed") == before
        idle = True
        await watcher_turn()
        (status,) = await admin.breakers("probed")
    assert status.state == "HALF_OPEN" and status.probe_holder == breakers.me


async def test_a_process_that_first_sees_another_holding_the_probe_gives_back_its_buffer(
    database_url, engine, driver, tables
):
    """A watcher reads every 2 s: it may miss OPEN and first see the breaker HALF_OPEN,
    held by another process. What this process buffered of the queue cannot run here,
    and the other's probe message may be among it: it goes back, as on OPEN."""
    async with engine.begin() as conn:
        await conn.execute(tables.controls.insert().values(
            queue="probed", channel="", updated_at=utc_now(), breaker_state="HALF_OPEN",
            breaker_failures=3, breaker_changed_at=utc_now(), breaker_reopens_at=utc_now(),
            breaker_probe="elsewhere:1:cafebabe",
        ))
    given_back: list[str] = []
    breakers = Breakers(
        engine=engine, driver=driver, queues=["probed"], threshold=3, cooldown=1.0,
        silent_after=60.0, log=lambda *args, **kwargs: None, on_opened=given_back.append,
        wake=asyncio.Event(), has_idle_worker=lambda: False,
    )
    async with engine.connect() as conn:
        readings = await controls.controls_among(conn, tables, ["probed"], breakers.silent_after)
    await breakers.observe(readings, breakers.versions())
    assert given_back == ["probed"]
