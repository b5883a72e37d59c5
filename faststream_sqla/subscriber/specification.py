"""AsyncAPI: one channel per queue a subscriber consumes."""

from __future__ import annotations

from faststream._internal.endpoint.subscriber import SubscriberSpecification
from faststream.specification.asyncapi.utils import resolve_payloads
from faststream.specification.schema import Message, Operation, SubscriberSpec

from faststream_sqla.broker_config import SqlaBrokerConfig

from .config import SqlaSubscriberSpecificationConfig


class SqlaSubscriberSpecification(
    SubscriberSpecification[SqlaBrokerConfig, SqlaSubscriberSpecificationConfig],
):
    @property
    def queues(self) -> list[str]:
        prefix = self._outer_config.prefix
        return [f"{prefix}{q}" for q in self.config.queues]

    @property
    def channel_labels(self) -> list[str]:
        return self.queues

    def _described(self) -> str | None:
        """The description, and the topic patterns the queue is bound to, if any."""
        if not self.config.topics:
            return self.description
        bound = f"Bound to topics: {', '.join(self.config.topics)}"
        return f"{self.description}\n\n{bound}" if self.description else bound

    def get_schema(self) -> dict[str, SubscriberSpec]:
        payloads = self.get_payloads()
        split = len(self.queues) > 1
        return {
            self._channel_key(queue, split=split): SubscriberSpec(
                address=queue,
                description=self._described(),
                operation=Operation(
                    message=Message(
                        title=f"{self._channel_key(queue, split=split)}:Message",
                        payload=resolve_payloads(payloads),
                    ),
                    bindings=None,
                ),
                bindings=None,
            )
            for queue in self.queues
        }
