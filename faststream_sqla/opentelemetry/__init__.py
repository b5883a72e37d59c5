"""OpenTelemetry tracing: one trace per message, from its publish through every
attempt to its outcome (`SqlaTelemetryMiddleware`)."""

from faststream_sqla.opentelemetry.middleware import SqlaTelemetryMiddleware

__all__ = ("SqlaTelemetryMiddleware",)
