from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from faststream._internal.configs import PublisherSpecificationConfig, PublisherUsecaseConfig

from faststream_sqla.broker_config import SqlaBrokerConfig


@dataclass(kw_only=True)
class SqlaPublisherSpecificationConfig(PublisherSpecificationConfig):
    queue: str


@dataclass(kw_only=True)
class SqlaPublisherConfig(PublisherUsecaseConfig):
    _outer_config: SqlaBrokerConfig = field(default_factory=SqlaBrokerConfig)
    queue: str
    headers: dict[str, Any] | None = None
