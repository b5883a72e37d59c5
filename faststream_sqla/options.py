"""Delivery options of a published message, declared once for every way to publish.

`broker.publish`, `broker.publish_batch`, a publisher's `publish` and `publish_batch`,
`SqlaResponse` and each `Envelope` of a batch take the same keyword arguments,
`**options: Unpack[DeliveryOptionArgs]`, and carry them as one `DeliveryOptions`. A new
option is a field here (and in the TypedDict, which a test keeps equal), validated in
`producer.build_rows`, and a column in `schema.MESSAGE_COLUMNS`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from typing_extensions import TypedDict, Unpack

from faststream_sqla.exceptions import InvalidOptionError
from faststream_sqla.schema import MAX_KEY_LENGTH


class DeliveryOptionArgs(TypedDict, total=False):
    """The delivery options, as keyword arguments of every publish call."""

    next_attempt_at: datetime | None
    """Aware datetime before which the message is not delivered."""
    delay: float | timedelta | str | None
    """Seconds, a timedelta or a duration string ("5s", "1m") from now on the database
    clock; instead of next_attempt_at."""
    expires_at: datetime | None
    """Aware datetime after which the message is never handed to a handler (archived
    EXPIRED instead)."""
    ttl: float | timedelta | str | None
    """Seconds, a timedelta or a duration string from now, on the publishing process's
    clock; instead of expires_at."""
    priority: int | None
    """0-10, higher first (default 0)."""
    ordering_key: str | None
    """Messages of one key are handled one at a time, in publish order."""
    idempotency_key: str | None
    """A queue holds one waiting or in-flight message per key: publishing it again returns
    that message's id and writes nothing."""
    channel: str | None
    """The channel (a tenant, a customer, an API) whose concurrency and rate limits the
    message waits for, taking turns with the queue's other channels (docs/flow-control.md)."""


@dataclass(frozen=True, slots=True)
class DeliveryOptions:
    """The delivery options of one publish call or one batch item, as given (validated
    when the rows are built, before anything is written)."""

    next_attempt_at: datetime | None = None
    delay: float | timedelta | str | None = None
    expires_at: datetime | None = None
    ttl: float | timedelta | str | None = None
    priority: int | None = None
    ordering_key: str | None = None
    idempotency_key: str | None = None
    channel: str | None = None

    @staticmethod
    def given(**options: Unpack[DeliveryOptionArgs]) -> DeliveryOptions:
        """The options of a publish call; `NO_OPTIONS` itself when none are given, so
        a batch can tell by identity that its items have no call options to merge."""
        return DeliveryOptions(**options) if options else NO_OPTIONS

    def over(self, defaults: DeliveryOptions) -> DeliveryOptions:
        """These options, with `defaults`' values where these are unset (None). Options
        that are alternatives to each other (a time or a delay) are taken as a group."""
        if defaults is NO_OPTIONS:  # the common case, once per batch item
            return self
        given = {
            f.name: value
            for f in dataclasses.fields(self)
            if (value := getattr(self, f.name)) is not None
        }
        for group in ALTERNATIVES:
            if not given.keys().isdisjoint(group):
                given = {name: None for name in group} | given
        return dataclasses.replace(defaults, **given) if given else defaults


#: options of which a message takes at most one
ALTERNATIVES: tuple[frozenset[str], ...] = (
    frozenset({"next_attempt_at", "delay"}),
    frozenset({"expires_at", "ttl"}),
)


NO_OPTIONS = DeliveryOptions()


class Envelope:
    """One message of a `publish_batch` with options of its own.

    `publish_batch(Envelope(a, delay=5), b, queue="q")`: an envelope's headers are
    added to the call's, and its options replace the call's where given.
    """

    __slots__ = ("body", "correlation_id", "headers", "options")

    def __init__(
        self,
        body: Any,
        *,
        headers: dict[str, Any] | None = None,
        correlation_id: str | None = None,
        **options: Unpack[DeliveryOptionArgs],
    ) -> None:
        self.body = body
        self.headers = headers
        self.correlation_id = correlation_id
        self.options = DeliveryOptions.given(**options)

    def __repr__(self) -> str:
        return f"Envelope({self.body!r}, headers={self.headers!r}, options={self.options!r})"


def checked_key(value: object, what: str) -> str | None:
    """A key a message is published with (ordering, idempotency, channel): None, or a
    str of 1 to MAX_KEY_LENGTH characters without NUL; else InvalidOptionError."""
    if value is None:
        return None
    if not isinstance(value, str):
        msg = f"{what} must be a str, got {type(value).__name__}"
        raise InvalidOptionError(msg)
    if not value or len(value) > MAX_KEY_LENGTH:
        msg = f"{what} must be 1 to {MAX_KEY_LENGTH} characters long, got {len(value)}"
        raise InvalidOptionError(msg)
    if "\x00" in value:  # PostgreSQL cannot store it; the others would
        msg = f"{what} must not contain NUL characters"
        raise InvalidOptionError(msg)
    return value
