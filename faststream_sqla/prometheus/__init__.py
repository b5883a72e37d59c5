"""Prometheus metrics: `SqlaPrometheusMiddleware` counts and times what the broker
publishes and consumes; `QueueStateCollector` reports what the queues hold."""

from faststream_sqla.prometheus.collector import QueueStateCollector
from faststream_sqla.prometheus.middleware import SqlaPrometheusMiddleware

__all__ = ("QueueStateCollector", "SqlaPrometheusMiddleware")
