"""AsyncAPI: a publisher is a channel named after its queue."""

from __future__ import annotations

from faststream._internal.endpoint.publisher import PublisherSpecification
from faststream.specification.asyncapi.utils import resolve_payloads
from faststream.specification.schema import Message, Operation, PublisherSpec

from faststream_sqla.broker_config import SqlaBrokerConfig

from .config import SqlaPublisherSpecificationConfig


class SqlaPublisherSpecification(
    PublisherSpecification[SqlaBrokerConfig, SqlaPublisherSpecificationConfig],
):
    @property
    def queue(self) -> str:
        return f"{self._outer_config.prefix}{self.config.queue}"

    @property
    def name(self) -> str:
        return self.config.title_ or f"{self.queue}:Publisher"

    def get_schema(self) -> dict[str, PublisherSpec]:
        payloads = self.get_payloads()
        return {
            self.name: PublisherSpec(
                address=self.queue,
                description=self.config.description_,
                operation=Operation(
                    message=Message(
                        title=f"{self.name}:Message",
                        payload=resolve_payloads(payloads, "Publisher"),
                    ),
                    bindings=None,
                ),
                bindings=None,
            ),
        }
