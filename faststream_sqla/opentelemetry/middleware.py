"""`SqlaTelemetryMiddleware`: FastStream's tracing for database queues.

The trace context travels in the message's stored headers (W3C `traceparent`), so
every delivery of a message, retries included, continues the trace its publish
started; each message of a `publish_batch` gets a context of its own. After each
attempt a short `settle` span, a child of that attempt's `process` span, records what
the subscriber made of it.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

from faststream.opentelemetry.baggage import Baggage
from faststream.opentelemetry.consts import ERROR_TYPE, MessageAction
from faststream.opentelemetry.middleware import BaseTelemetryMiddleware, TelemetryMiddleware
from opentelemetry import trace
from opentelemetry.semconv.trace import SpanAttributes
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from faststream_sqla.message import ClaimedMessage
from faststream_sqla.opentelemetry.provider import (
    ATTEMPT,
    NEXT_ATTEMPT_AT,
    OUTCOME,
    settings_provider_factory,
)
from faststream_sqla.options import Envelope
from faststream_sqla.response import SqlaPublishCommand
from faststream_sqla.schema import MessageState

if TYPE_CHECKING:
    from types import TracebackType

    from faststream._internal.basic_types import AsyncFunc, AsyncFuncAny
    from faststream._internal.context.repository import ContextRepo
    from faststream.message import StreamMessage
    from opentelemetry.metrics import Meter, MeterProvider
    from opentelemetry.trace import TracerProvider

    from faststream_sqla.drivers.base import Outcome

SETTLE = "settle"

_PROPAGATOR = TraceContextTextMapPropagator()


class SqlaTelemetryMiddleware(TelemetryMiddleware[SqlaPublishCommand]):
    """Spans for publish (`<queue> create` and `<queue> publish`), each attempt
    (`<queue> process`, with `messaging.sqla.attempt`) and its outcome (`<queue> settle`,
    with `messaging.sqla.outcome`), plus FastStream's publish and process metrics.

    `SqlaBroker(url, middlewares=[SqlaTelemetryMiddleware(tracer_provider=provider)])`.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        meter: Meter | None = None,
        include_messages_counters: bool = True,
    ) -> None:
        super().__init__(
            settings_provider_factory=settings_provider_factory,
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            meter=meter,
            include_messages_counters=include_messages_counters,
        )

    def __call__(self, msg: Any | None, /, *, context: ContextRepo) -> SqlaTelemetryScope:
        return SqlaTelemetryScope(
            msg,
            tracer=self._tracer,
            metrics_container=self._metrics,
            settings_provider_factory=self._settings_provider_factory,
            context=context,
        )


class SqlaTelemetryScope(BaseTelemetryMiddleware[SqlaPublishCommand]):
    """One delivery's or one publish's tracing (FastStream's, plus the two things a
    database queue adds: batches whose messages are traced apart, and outcomes)."""

    def __init__(self, msg: Any | None, /, **kwargs: Any) -> None:
        super().__init__(msg, **kwargs)
        self._raw = msg

    async def publish_scope(self, call_next: AsyncFunc, msg: SqlaPublishCommand) -> Any:
        if len(msg.batch_bodies) <= 1:
            return await super().publish_scope(call_next, msg)
        return await self._publish_batch(call_next, msg)

    async def _publish_batch(self, call_next: AsyncFunc, cmd: SqlaPublishCommand) -> Any:
        """Each message of the batch gets a `create` span and carries its context; one
        `publish` span, linked to them all, times the insert."""
        provider = settings_provider_factory(None)
        destination = provider.get_publish_destination_name(cmd)
        attributes = provider.get_publish_attrs_from_cmd(cmd)
        current_baggage: Baggage | None = self.context.get_local("baggage")
        if current_baggage:
            cmd.headers.update(current_baggage.to_headers())

        links, bodies = [], []
        # the items as given: an Envelope's own headers stay beside the context
        for body in cmd.batch_items:
            create = self._tracer.start_span(
                name=f"{destination} {MessageAction.CREATE}",
                kind=SpanKind.PRODUCER,
                attributes=attributes,
            )
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(create))
            create.end()
            links.append(Link(create.get_span_context()))
            bodies.append(_with_headers(body, carrier))
        cmd.batch_bodies = tuple(bodies)  # as the getter types it: older mypy wants both alike

        count = len(bodies)
        metrics_attributes = {
            SpanAttributes.MESSAGING_SYSTEM: provider.messaging_system,
            SpanAttributes.MESSAGING_DESTINATION_NAME: destination,
        }
        started = time.perf_counter()
        try:
            with self._tracer.start_as_current_span(
                name=f"{destination} {MessageAction.PUBLISH}",
                kind=SpanKind.PRODUCER,
                attributes={**attributes, SpanAttributes.MESSAGING_BATCH_MESSAGE_COUNT: count},
                links=links,
            ) as span:
                span.set_attribute(SpanAttributes.MESSAGING_OPERATION, MessageAction.PUBLISH)
                return await call_next(cmd)
        except Exception as e:
            metrics_attributes[ERROR_TYPE] = type(e).__name__
            raise
        finally:
            self._metrics.observe_publish(metrics_attributes, time.perf_counter() - started, count)

    async def consume_scope(self, call_next: AsyncFuncAny, msg: StreamMessage[Any]) -> Any:
        raw = msg.raw_message
        if isinstance(raw, list):
            # FastStream links a batch's process span to each message's context by the
            # correlation id in the message's headers; ours is a column of its own.
            msg.batch_headers = [
                {**item.headers, "correlation_id": item.correlation_id or str(item.id)}
                for item in raw
            ]
        return await super().consume_scope(call_next, msg)

    async def after_processed(
        self,
        exc_type: type[BaseException] | None = None,
        exc_val: BaseException | None = None,
        exc_tb: TracebackType | None = None,
    ) -> bool | None:
        span = self._current_span
        raw = self._raw
        if isinstance(raw, ClaimedMessage) and span is not None and span.is_recording():
            parent = trace.set_span_in_context(span)
            queue = raw.queue
            tracer = self._tracer

            def settled(outcome: Outcome | None) -> None:
                state = MessageState.PENDING if outcome is None else outcome.state
                attributes: dict[str, Any] = {
                    SpanAttributes.MESSAGING_OPERATION: SETTLE,
                    SpanAttributes.MESSAGING_MESSAGE_ID: str(raw.id),
                    OUTCOME: str(getattr(state, "value", state)),
                    ATTEMPT: raw.attempts_count + 1,
                }
                if outcome is not None and outcome.next_attempt_at is not None:
                    attributes[NEXT_ATTEMPT_AT] = outcome.next_attempt_at.isoformat() + "+00:00"
                tracer.start_span(
                    name=f"{queue} {SETTLE}",
                    kind=SpanKind.CONSUMER,
                    context=parent,
                    attributes=attributes,
                ).end()

            raw.on_outcome = settled
        return await super().after_processed(exc_type, exc_val, exc_tb)


def _with_headers(body: Any, headers: dict[str, str]) -> Envelope:
    """`body` as an `Envelope` whose headers add `headers` (an envelope is copied)."""
    if isinstance(body, Envelope):
        envelope = copy.copy(body)
        envelope.headers = {**(body.headers or {}), **headers}
        return envelope
    return Envelope(body, headers=headers)
