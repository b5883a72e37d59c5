"""`SqlaPrometheusMiddleware`: FastStream's Prometheus metrics for database queues."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from faststream._internal.constants import EMPTY
from faststream.prometheus.middleware import PrometheusMiddleware

from faststream_sqla.prometheus.provider import Delivery, settings_provider_factory
from faststream_sqla.response import SqlaPublishCommand

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


class SqlaPrometheusMiddleware(PrometheusMiddleware[Delivery, SqlaPublishCommand]):
    """Received, processed (by status), in-process and published messages, and the
    time each took, labelled by queue (`handler` on the consuming side, `destination`
    on the publishing one) and `broker="sqla"`.

    `SqlaBroker(url, middlewares=[SqlaPrometheusMiddleware(registry=registry)])`. A
    batch handler's call counts each of its messages; a `publish_batch` counts each
    message it stores.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry,
        app_name: str = EMPTY,
        metrics_prefix: str = "faststream",
        received_messages_size_buckets: Sequence[float] | None = None,
        custom_labels: dict[str, str | Callable[[Any], str]] | None = None,
    ) -> None:
        super().__init__(
            settings_provider_factory=settings_provider_factory,
            registry=registry,
            app_name=app_name,
            metrics_prefix=metrics_prefix,
            received_messages_size_buckets=received_messages_size_buckets,
            custom_labels=custom_labels,
        )
