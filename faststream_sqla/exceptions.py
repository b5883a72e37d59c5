"""Typed errors. Each names the problem and, where there is one, the fix.

Every one derives from `SqlaBrokerError`, so a caller can catch them all, or by kind.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta
from typing import ClassVar

#: the longest a handler may ask a message to wait before its retry (RetryAfter, nack)
MAX_RETRY_DELAY_SECONDS = 24 * 3600


class SqlaBrokerError(Exception):
    """Base class of every error this package raises on purpose."""


class InvalidOptionError(SqlaBrokerError, ValueError):
    """An option was given a value it cannot take."""


class ReplicaMismatchError(InvalidOptionError):
    """A `read_url` names another kind of database than the URL it reads for: a replica
    holds the same kind of database as its primary."""


#: an error message echoes at most this many characters of a value it names
SHOWN_CHARACTERS = 100


def shown(value: object) -> str:
    """`value` as an error message echoes it: its repr, cut after SHOWN_CHARACTERS with
    the length said, so that a 10,000-character name does not bury the problem."""
    if isinstance(value, int) and value.bit_length() > 3 * SHOWN_CHARACTERS:
        # repr() of an int of over 4,300 digits raises; the size is what matters here
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARACTERS:
            return repr(value)
        return f"{value[:SHOWN_CHARACTERS]!r}... ({len(value)} characters)"
    text = repr(value)
    if len(text) > SHOWN_CHARACTERS:
        return f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters in all)"
    return text


def require_whole(name: str, value: object, high: int, *, low: int = 1) -> int:
    """`value`, if it is an int (not a bool) from `low` to `high`; else
    InvalidOptionError naming the option and its bounds."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        msg = f"{name} must be an integer from {low} to {high:,}, got {shown(value)}"
        raise InvalidOptionError(msg)
    return value


class InvalidQueueNameError(InvalidOptionError):
    """A queue name is empty, too long or not a string."""


class InvalidTopicError(InvalidOptionError):
    """A topic or a topic pattern is malformed: an empty word, a character outside
    letters, digits, `_` and `-`, a wildcard mixed into a word, a wildcard in a topic
    published to, or too long."""


class MessageSerializationError(SqlaBrokerError, TypeError):
    """A message body or its headers cannot be turned into bytes/JSON."""


class MessageTooLargeError(SqlaBrokerError, ValueError):
    """A message is larger than the database accepts in one statement."""


class SchemaError(SqlaBrokerError):
    """The database does not hold the tables this broker needs."""


class SchemaMissingError(SchemaError):
    """Our tables do not exist yet."""


class SchemaOutdatedError(SchemaError):
    """Our tables exist but are not at the revision this version expects."""


class DatabaseUnreachableError(SqlaBrokerError, ConnectionError):
    """The database could not be reached: when the broker connected, or by a publish
    (the driver's own error is chained as the cause)."""


class ReadTimeoutError(SqlaBrokerError, TimeoutError):
    """A read of the admin API passed its bound (`QueueAdmin`'s `read_timeout`): the
    database did not answer in time, most often because a lock held elsewhere kept the
    read waiting. `seconds` is the bound; the database's own error is the cause."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the database did not answer within {seconds:g} s (read_timeout)")
        self.seconds = seconds


def require_seconds(name: str, value: object, low: float, high: float) -> float:
    """`value` as seconds, if it is a number (not a bool) from `low` to `high`; else
    InvalidOptionError naming the option and its bounds."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not low <= value <= high:
        msg = f"{name} must be a number of seconds from {low:g} to {high:g}, got {shown(value)}"
        raise InvalidOptionError(msg)
    return float(value)


class UnknownMessageError(SqlaBrokerError, LookupError):
    """No message with that id is queued or archived."""


class MessageStateConflictError(InvalidOptionError):
    """A message is not in a state the operation takes (still queued, moved back
    already, or in another state); nothing was changed."""


class UnknownQueueError(SqlaBrokerError, LookupError):
    """No message of that queue is queued or archived."""


class UnknownScheduleError(SqlaBrokerError, LookupError):
    """No schedule of that name."""


class InvalidEndpointError(InvalidOptionError):
    """An endpoint's name, URL, headers, timeout or retry schedule is not allowed, or
    its host resolves to a private address without `allow_private`; nothing was
    written."""


class UnresolvedHostError(InvalidEndpointError):
    """An endpoint's host does not resolve. Adding the endpoint is refused; a delivery
    retries, as after a connection error, since a resolver can fail for a while."""


class UnknownEndpointError(SqlaBrokerError, LookupError):
    """No endpoint of that name."""


class EndpointExistsError(SqlaBrokerError, ValueError):
    """An endpoint of that name exists already; nothing was written."""


class WebhookVerificationError(SqlaBrokerError, ValueError):
    """A received webhook's signature headers are missing, stale or match no secret
    (faststream_sqla.webhooks.verify)."""


class QueueFullError(SqlaBrokerError):
    """A publish would take a queue past its `max_queue_size`; nothing was written."""


class IdempotencyConflictError(SqlaBrokerError, ValueError):
    """An idempotency key is held by a message with a different payload (or is given
    twice in one batch with different payloads); nothing was written. `message_id` is
    the holder's id where it is known."""

    def __init__(self, message: str, *, key: str, message_id: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.message_id = message_id


class HandlerTimeoutError(SqlaBrokerError, TimeoutError):
    """Recorded as a message's error when its handler ran longer than the subscriber's
    `handler_timeout` and was cancelled; the attempt counts as failed."""


class RetryAfter(SqlaBrokerError):
    """Raise from a handler to retry the message after exactly `seconds` (at most 24
    hours; longer is cut to that) instead of the retry strategy's backoff. The strategy's
    `max_attempts` still applies, so a message that keeps asking still ends FAILED."""

    #: a request, not a fault: the broker's logger writes it as one line at this level,
    #: without a traceback (broker/logging.py)
    handler_log_level: ClassVar[int] = logging.WARNING

    def __init__(self, seconds: float | timedelta, reason: str = "") -> None:
        value = seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            msg = f"RetryAfter needs a finite number of seconds >= 0, got {shown(seconds)}"
            raise InvalidOptionError(msg)
        self.seconds = min(float(value), MAX_RETRY_DELAY_SECONDS)
        self.reason = reason
        super().__init__(f"retry after {self.seconds:g}s" + (f": {reason}" if reason else ""))
