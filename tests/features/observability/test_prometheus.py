"""Prometheus: the middleware's counters from a real broker, and the queue-state
collector's gauges against seeded rows, on every database."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from faststream_sqla import InvalidOptionError, SqlaBroker
from faststream_sqla.admin import QueueAdmin
from faststream_sqla.prometheus import QueueStateCollector, SqlaPrometheusMiddleware
from faststream_sqla.retry import ConstantRetryStrategy, NoRetryStrategy
from tests.support.helpers import FAST, Recorder, wait_until


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, {"app_name": "faststream", "broker": "sqla", **labels}) or 0.0


async def test_middleware_counts_consumed_and_published_messages(database_url):
    registry = CollectorRegistry()
    broker = SqlaBroker(database_url, middlewares=[SqlaPrometheusMiddleware(registry=registry)])
    handled, batches, failures = Recorder(), Recorder(), Recorder()

    @broker.subscriber("good", **FAST)
    async def good(body: str) -> None:
        handled.record(body)

    @broker.subscriber("bad", retry_strategy=NoRetryStrategy(), **FAST)
    async def bad(body: str) -> None:
        failures.record(body)
        raise ValueError(body)

    # claims wait until all five are stored, so the handler gets them in one call
    @broker.subscriber("many", batch=True, fetch_batch_size=10, **FAST)
    async def many(bodies: list[str]) -> None:
        batches.record(bodies)

    async with broker:
        await broker.start()
        await broker.publish("a", queue="good")
        await broker.publish("b", queue="good")
        await broker.publish("x", queue="bad")
        await broker.publish_batch(*"vwxyz", queue="many")
        await handled.wait_for(2)
        await failures.wait_for(1)

        async def settled() -> bool:
            # a claim may split the batch over calls; the counts must add up either way
            return sum(len(b) for b in batches.calls) == 5 and sample(
                registry, "faststream_received_processed_messages_total",
                handler="bad", status="error",
            ) == 1

        await wait_until(settled)

    counted = [
        ("received_messages_total", {"handler": "good"}, 2),
        ("received_processed_messages_total", {"handler": "good", "status": "acked"}, 2),
        (
            "received_processed_messages_exceptions_total",
            {"handler": "bad", "exception_type": "ValueError"},
            1,
        ),
        # a batch handler's call counts every message it holds
        ("received_messages_total", {"handler": "many"}, 5),
        ("received_processed_messages_total", {"handler": "many", "status": "acked"}, 5),
        ("received_processed_messages_duration_seconds_count", {"handler": "good"}, 2),
        ("received_messages_in_process", {"handler": "good"}, 0),
        # publish_batch counts each message it stored, in one timed call
        ("published_messages_total", {"destination": "many", "status": "success"}, 5),
        ("published_messages_duration_seconds_count", {"destination": "many"}, 1),
        ("published_messages_total", {"destination": "good", "status": "success"}, 2),
    ]
    for name, labels, value in counted:
        assert sample(registry, f"faststream_{name}", **labels) == value, (name, labels)
    assert b'handler="good"' in generate_latest(registry)


async def test_middleware_counts_a_failed_publish(database_url):
    registry = CollectorRegistry()
    broker = SqlaBroker(database_url, middlewares=[SqlaPrometheusMiddleware(registry=registry)])
    async with broker:
        with pytest.raises(InvalidOptionError):
            await broker.publish("late", queue="q", priority=99)
    assert sample(
        registry, "faststream_published_messages_total", destination="q", status="error"
    ) == 1
    assert sample(
        registry, "faststream_published_messages_exceptions_total",
        destination="q", exception_type="InvalidOptionError",
    ) == 1


def gauge(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(f"faststream_sqla_{name}", labels)


async def test_collector_reports_seeded_queue_state(database_url, engine):
    broker = SqlaBroker(database_url)
    held = asyncio.Event()
    release = asyncio.Event()
    failed = Recorder()

    @broker.subscriber("busy", **FAST)
    async def busy(body: str) -> None:
        held.set()
        await release.wait()

    @broker.subscriber(
        "flaky", retry_strategy=ConstantRetryStrategy(delay_seconds=3600), **FAST
    )
    async def flaky(body: str) -> None:
        failed.record(body)
        raise RuntimeError("again later")

    @broker.subscriber("doomed", retry_strategy=NoRetryStrategy(), **FAST)
    async def doomed(body: str) -> None:
        failed.record(body)
        raise RuntimeError("never")

    registry = CollectorRegistry()
    collector = QueueStateCollector(
        QueueAdmin(engine), queues=["work", "busy", "flaky", "doomed", "idle", "later"],
        interval=3600, registry=registry,
    )
    async with broker:
        await broker.start()
        await broker.publish("in flight", queue="busy")
        await held.wait()
        # no consumer: these stay ready
        await broker.publish_batch("r1", "r2", "r3", queue="work")
        await broker.publish("s", queue="later", delay=timedelta(hours=1))
        await broker.publish("f", queue="flaky")
        await broker.publish("d", queue="doomed")
        await failed.wait_for(2)

        async def outcomes_written() -> bool:
            (flaky_stats, doomed_stats) = await QueueAdmin(engine).queues(["flaky", "doomed"])
            return flaky_stats.retrying.value == 1 and doomed_stats.failed_last_hour.value == 1

        await wait_until(outcomes_written)
        async with collector:
            assert gauge(registry, "queue_depth", queue="work", state="ready") == 3
            assert gauge(registry, "queue_in_flight", queue="busy") == 1
            assert gauge(registry, "queue_in_flight", queue="work") == 0
            assert gauge(registry, "queue_oldest_ready_age_seconds", queue="work") >= 0
            assert gauge(registry, "queue_depth", queue="later", state="scheduled") == 1
            assert gauge(registry, "queue_depth", queue="later", state="ready") == 0
            assert gauge(registry, "queue_depth", queue="flaky", state="retrying") == 1
            assert gauge(registry, "queue_failed_last_hour", queue="doomed") == 1
            assert gauge(registry, "queue_in_flight", queue="doomed") == 0
            # a queue no message has reached yet is reported as empty
            assert gauge(registry, "queue_depth", queue="idle", state="ready") == 0
            assert gauge(registry, "queue_state_read_timestamp_seconds") > 0

            # within the interval a scrape answers from the reading: no new read
            release.set()
            await broker.publish("more", queue="work")
            assert gauge(registry, "queue_depth", queue="work", state="ready") == 3
            collector.interval = 0.1  # now a stale reading makes the next scrape read again
            registry.collect()  # starts the reading; this scrape still sees the old one

            async def reread() -> bool:
                return gauge(registry, "queue_in_flight", queue="busy") == 0 and gauge(
                    registry, "queue_depth", queue="work", state="ready"
                ) == 4

            await wait_until(reread)


async def test_collector_rejects_bad_options(engine):
    with pytest.raises(InvalidOptionError, match="interval"):
        QueueStateCollector(engine, interval=0)
    with pytest.raises(InvalidOptionError, match="metrics_prefix"):
        QueueStateCollector(engine, metrics_prefix="no spaces")
    with pytest.raises(InvalidOptionError):
        QueueStateCollector(engine, queues=[""])


async def test_collector_reports_circuit_breakers(database_url, engine):
    """A queue's breaker and a channel's, as gauges: one series per state, 1 for the
    current one."""
    broker = SqlaBroker(database_url)
    failed = Recorder()

    @broker.subscriber(
        "calls", circuit_breaker_threshold=1, circuit_breaker_cooldown=3600,
        circuit_breaker_per_channel=True,
        retry_strategy=ConstantRetryStrategy(delay_seconds=3600), **FAST,
    )
    async def calls(body: str) -> None:
        failed.record(body)
        raise RuntimeError("down")

    registry = CollectorRegistry()
    async with QueueAdmin(engine) as admin, broker:
        await broker.start()
        # the channel's first: once the queue's own breaker opens, nothing more is claimed
        await broker.publish("tenant", queue="calls", channel="acme")
        await failed.wait_for(1)
        await broker.publish("plain", queue="calls")
        await failed.wait_for(2)

        async def both_open() -> bool:
            return [b.state for b in await admin.breakers("calls")] == ["OPEN", "OPEN"]

        await wait_until(both_open)
        async with QueueStateCollector(admin, queues=["calls"], interval=3600, registry=registry):
            for channel in ("", "acme"):
                assert gauge(
                    registry, "circuit_breaker_state", queue="calls", channel=channel,
                    state="OPEN",
                ) == 1
                assert gauge(
                    registry, "circuit_breaker_state", queue="calls", channel=channel,
                    state="CLOSED",
                ) == 0
                assert gauge(
                    registry, "circuit_breaker_failures", queue="calls", channel=channel
                ) == 1
