"""`Schedule`: a message published to a queue on an interval or a cron expression,
as declared in code with `broker.schedule(...)` or `subscriber(..., schedule=...)`."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from faststream_sqla.exceptions import InvalidOptionError, shown
from faststream_sqla.options import DeliveryOptions
from faststream_sqla.producer import checked_headers, row_options
from faststream_sqla.schema import MAX_SCHEDULE_NAME_LENGTH, validate_queue_name

from .timing import DEFAULT_CATCH_UP_LIMIT, Missed, Timing, checked_missed


@dataclass(frozen=True)
class Schedule:
    """A message to publish on a schedule. Give exactly one of `every` (a timedelta or
    seconds, at least 1 s) and `cron` (five fields, or six with seconds last, read in
    `timezone`, default UTC).

    `name` identifies the schedule in the database (default: its queue's name); the
    declaration in code is the source of truth for everything but `paused`, which
    `faststream-sqla schedule pause|resume` changes. `missed`: what happens to ticks
    that fell due while no process ran ("skip": the latest fires, the others are
    dropped; "catch_up": each fires, at most `catch_up_limit`, the latest ones).
    `priority`, `ordering_key`, `delay` and `ttl` apply to every message it publishes.
    """

    every: timedelta | float | None = None
    cron: str | None = None
    timezone: str | None = None
    body: Any = None
    name: str | None = None
    queue: str | None = None
    headers: dict[str, Any] | None = None
    missed: str = Missed.SKIP.value
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    priority: int | None = None
    ordering_key: str | None = None
    delay: float | timedelta | None = None
    ttl: float | timedelta | None = None
    #: checked forms, filled on construction
    timing: Timing = field(init=False, repr=False, compare=False)
    policy: Missed = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "timing", Timing.of(self.every, self.cron, self.timezone))
        policy, _ = checked_missed(self.missed, self.catch_up_limit)
        object.__setattr__(self, "policy", policy)
        if self.queue is not None:
            validate_queue_name(self.queue)
        if self.name is not None:
            checked_schedule_name(self.name)
        checked_headers(self.headers)
        row_options(self.delivery_options)  # raises on a bad priority, key, delay or ttl

    @property
    def delivery_options(self) -> DeliveryOptions:
        return DeliveryOptions(
            priority=self.priority, ordering_key=self.ordering_key, delay=self.delay, ttl=self.ttl
        )

    @property
    def stored_options(self) -> dict[str, Any]:
        """The delivery options as the schedule row keeps them (JSON; seconds)."""
        stored: dict[str, Any] = {}
        for option in ("priority", "ordering_key", "delay", "ttl"):
            value = getattr(self, option)
            if isinstance(value, timedelta):
                value = value.total_seconds()
            if value is not None:
                stored[option] = value
        return stored

    def bound(self, queue: str) -> Schedule:
        """This schedule publishing to `queue` (a subscriber's), named after it unless
        it has a name."""
        if self.queue is not None and self.queue != queue:
            msg = (
                f"schedule {shown(self.key)} publishes to {shown(self.queue)}, not to "
                f"{shown(queue)}"
            )
            raise InvalidOptionError(msg)
        bound = replace(self, queue=validate_queue_name(queue))
        checked_schedule_name(bound.key)
        return bound

    @property
    def key(self) -> str:
        """The name in the database."""
        name = self.name if self.name is not None else self.queue
        if name is None:
            msg = "a schedule needs a queue"
            raise InvalidOptionError(msg)
        return name


def checked_schedule_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or not name.isprintable():
        msg = f"a schedule name must be printable text, got {shown(name)}"
        raise InvalidOptionError(msg)
    if len(name) > MAX_SCHEDULE_NAME_LENGTH:
        msg = (
            f"schedule name is {len(name)} characters long, the limit is {MAX_SCHEDULE_NAME_LENGTH}"
        )
        raise InvalidOptionError(msg)
    return name
