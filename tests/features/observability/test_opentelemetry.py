"""OpenTelemetry: a message's trace runs from its publish (plain, outbox, batch) through
every attempt to its outcome, on every database."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from sqlalchemy.ext.asyncio import AsyncSession

from faststream_sqla import Envelope, SqlaBroker, SqlaMessage
from faststream_sqla.opentelemetry import SqlaTelemetryMiddleware
from faststream_sqla.retry import ConstantRetryStrategy
from tests.support.helpers import FAST, Recorder, one_handled, recording, wait_until


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


async def spans_named(exporter: InMemorySpanExporter, name: str, n: int) -> list[ReadableSpan]:
    async def enough() -> bool:
        return len(named(exporter, name)) >= n

    await wait_until(enough)
    return named(exporter, name)


async def test_one_trace_from_publish_through_retries_to_the_outcome(
    database_url, provider, exporter
):
    broker = SqlaBroker(database_url, middlewares=[SqlaTelemetryMiddleware(tracer_provider=provider)])
    attempts = Recorder()

    @broker.subscriber("orders", retry_strategy=ConstantRetryStrategy(delay_seconds=0.01), **FAST)
    async def handle(body: str, msg: SqlaMessage) -> None:
        attempts.record(msg.attempts_count)
        if msg.attempts_count == 0:
            raise RuntimeError("first attempt fails")

    async with one_handled(broker, attempts, "o-1", queue="orders", calls=2) as message_id:
        settles = await spans_named(exporter, "orders settle", 2)

    (create,) = named(exporter, "orders create")
    (publish,) = named(exporter, "orders publish")
    processes = sorted(named(exporter, "orders process"), key=lambda s: s.attributes["messaging.sqla.attempt"])
    trace_id = create.context.trace_id
    assert {s.context.trace_id for s in (publish, *processes, *settles)} == {trace_id}
    # every attempt continues from the publish's context, carried in the stored headers
    assert [p.parent.span_id for p in processes] == [create.context.span_id] * 2
    assert [p.attributes["messaging.sqla.attempt"] for p in processes] == [1, 2]
    assert processes[0].status.status_code is StatusCode.ERROR
    assert processes[1].status.status_code is not StatusCode.ERROR
    # each attempt's outcome, under its own process span
    outcome_of = {s.parent.span_id: s.attributes["messaging.sqla.outcome"] for s in settles}
    assert outcome_of == {
        processes[0].context.span_id: "RETRYABLE",
        processes[1].context.span_id: "COMPLETED",
    }
    retry = next(s for s in settles if s.attributes["messaging.sqla.outcome"] == "RETRYABLE")
    assert "messaging.sqla.next_attempt_at" in retry.attributes
    assert all(s.attributes["messaging.message.id"] == str(message_id) for s in settles)


async def test_outbox_publish_continues_the_callers_trace(
    make_broker, engine, provider, exporter
):
    broker = make_broker(middlewares=[SqlaTelemetryMiddleware(tracer_provider=provider)])
    handled = recording(broker, "outbox")

    tracer = provider.get_tracer("test")
    async with broker:
        await broker.start()
        with tracer.start_as_current_span("request") as request:
            async with AsyncSession(engine) as session, session.begin():
                await broker.publish("in the transaction", queue="outbox", connection=session)
        await handled.wait_for(1)
        await spans_named(exporter, "outbox settle", 1)

    (create,) = named(exporter, "outbox create")
    (process,) = named(exporter, "outbox process")
    assert create.parent.span_id == request.get_span_context().span_id
    assert process.context.trace_id == request.get_span_context().trace_id
    assert process.parent.span_id == create.context.span_id


async def test_each_message_of_a_batch_carries_its_own_context(
    make_broker, provider, exporter
):
    broker = make_broker(middlewares=[SqlaTelemetryMiddleware(tracer_provider=provider)])
    handled = recording(
        broker, "parts",
        record=lambda body, msg: (body, msg.headers["traceparent"], msg.headers.get("kept")),
    )

    async with broker:
        await broker.start()
        await broker.publish_batch(
            "a", Envelope("b", headers={"kept": "yes"}), "c", queue="parts"
        )
        calls = await handled.wait_for(3)
        await spans_named(exporter, "parts settle", 3)

    creates = named(exporter, "parts create")
    (publish,) = named(exporter, "parts publish")
    processes = named(exporter, "parts process")
    assert len(creates) == 3
    assert publish.attributes["messaging.batch.message_count"] == 3
    assert {link.context.span_id for link in publish.links} == {c.context.span_id for c in creates}
    # three distinct contexts, one per message, and each delivery continues its own
    assert len({traceparent for _, traceparent, _ in calls}) == 3
    # an envelope keeps its own headers beside the context
    assert {body: kept for body, _, kept in calls} == {"a": None, "b": "yes", "c": None}
    assert sorted(p.parent.span_id for p in processes) == sorted(c.context.span_id for c in creates)


async def test_a_batch_handler_links_every_message(database_url, provider, exporter):
    broker = SqlaBroker(database_url, middlewares=[SqlaTelemetryMiddleware(tracer_provider=provider)])
    handled = Recorder()

    @broker.subscriber("bulk", batch=True, fetch_batch_size=10, **FAST)
    async def handle(bodies: list[str]) -> None:
        for body in bodies:
            handled.record(body)

    async with broker:
        await broker.start()
        for body in ("x", "y"):  # two publishes, two traces
            await broker.publish(body, queue="bulk", correlation_id=f"c-{body}")
        await handled.wait_for(2)
        processes = await spans_named(exporter, "bulk process", 1)

    creates = [s for s in named(exporter, "bulk create") if s.kind is SpanKind.PRODUCER]
    assert len(creates) == 2
    # as FastStream does for batches: each call's process span starts a trace of its
    # own, under a receiving span linked to every message's publish
    received = {s.context.span_id: s for s in named(exporter, "bulk create")
                if s.kind is SpanKind.CONSUMER}
    assert {p.parent.span_id for p in processes} <= received.keys()
    linked = {link.context.span_id for r in received.values() for link in r.links}
    assert linked == {c.context.span_id for c in creates}
