from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faststream_sqla.schema import validate_queue_name

from .config import SqlaPublisherConfig, SqlaPublisherSpecificationConfig
from .specification import SqlaPublisherSpecification
from .usecase import SqlaPublisher

if TYPE_CHECKING:
    from faststream_sqla.broker_config import SqlaBrokerConfig


def create_publisher(
    *,
    queue: str,
    headers: dict[str, Any] | None,
    config: SqlaBrokerConfig,
    title_: str | None,
    description_: str | None,
    schema_: Any | None,
    include_in_schema: bool,
) -> SqlaPublisher:
    validate_queue_name(queue)
    return SqlaPublisher(
        SqlaPublisherConfig(queue=queue, headers=headers, _outer_config=config),
        SqlaPublisherSpecification(
            config,
            SqlaPublisherSpecificationConfig(
                queue=queue,
                title_=title_,
                description_=description_,
                schema_=schema_,
                include_in_schema=include_in_schema,
            ),
        ),
    )
