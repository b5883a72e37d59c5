"""faststream-sqla: durable FastStream queues in PostgreSQL, MySQL/MariaDB and SQLite."""

from faststream_sqla.annotations import SqlaMessage
from faststream_sqla.broker.broker import SqlaBroker
from faststream_sqla.broker.logging import MessageLogFields
from faststream_sqla.broker.router import SqlaPublisherArgs, SqlaRoute, SqlaRouter
from faststream_sqla.exceptions import (
    DatabaseUnreachableError,
    EndpointExistsError,
    HandlerTimeoutError,
    IdempotencyConflictError,
    InvalidEndpointError,
    InvalidOptionError,
    InvalidQueueNameError,
    InvalidTopicError,
    MessageSerializationError,
    MessageStateConflictError,
    MessageTooLargeError,
    QueueFullError,
    ReadTimeoutError,
    ReplicaMismatchError,
    RetryAfter,
    SchemaError,
    SchemaMissingError,
    SchemaOutdatedError,
    SqlaBrokerError,
    UnknownEndpointError,
    UnknownMessageError,
    UnknownQueueError,
    UnknownScheduleError,
    UnresolvedHostError,
    WebhookVerificationError,
)
from faststream_sqla.migrations import upgrade_schema
from faststream_sqla.options import Envelope
from faststream_sqla.publisher.usecase import SqlaPublisher
from faststream_sqla.response import SqlaResponse
from faststream_sqla.schedules import Schedule
from faststream_sqla.schema import MessageState
from faststream_sqla.startup_errors import install as _install_short_startup_errors
from faststream_sqla.testing import TestSqlaBroker

# under `faststream run`, our errors print as one line instead of a long traceback
_install_short_startup_errors()

__all__ = (
    "DatabaseUnreachableError",
    "EndpointExistsError",
    "Envelope",
    "HandlerTimeoutError",
    "IdempotencyConflictError",
    "InvalidEndpointError",
    "InvalidOptionError",
    "InvalidQueueNameError",
    "InvalidTopicError",
    "MessageLogFields",
    "MessageSerializationError",
    "MessageState",
    "MessageStateConflictError",
    "MessageTooLargeError",
    "QueueFullError",
    "ReadTimeoutError",
    "ReplicaMismatchError",
    "RetryAfter",
    "Schedule",
    "SchemaError",
    "SchemaMissingError",
    "SchemaOutdatedError",
    "SqlaBroker",
    "SqlaBrokerError",
    "SqlaMessage",
    "SqlaPublisher",
    "SqlaPublisherArgs",
    "SqlaResponse",
    "SqlaRoute",
    "SqlaRouter",
    "TestSqlaBroker",
    "UnknownEndpointError",
    "UnknownMessageError",
    "UnknownQueueError",
    "UnknownScheduleError",
    "UnresolvedHostError",
    "WebhookVerificationError",
    "upgrade_schema",
)
