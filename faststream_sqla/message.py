"""The message a handler receives, and the claimed row behind it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from faststream.message import AckStatus, StreamMessage

from .clock import to_aware
from .exceptions import InvalidOptionError


#: ten years: a longer wait is a mistake, and would overflow datetime arithmetic
MAX_NACK_DELAY_SECONDS = 10 * 365 * 24 * 3600


def validate_delay(delay: object, what: str = "delay") -> float:
    """A delay in seconds: finite, not negative, at most ten years."""
    if (
        isinstance(delay, bool)
        or not isinstance(delay, (int, float))
        or not 0 <= delay <= MAX_NACK_DELAY_SECONDS
    ):
        msg = f"{what} must be 0 to {MAX_NACK_DELAY_SECONDS} seconds, got {delay!r}"
        raise InvalidOptionError(msg)
    return float(delay)


@dataclass(slots=True, eq=False)
class ClaimedMessage:
    """One delivery of a stored message: the row as claimed, plus the handler's decision.

    Datetimes are naive UTC, as stored, on the database clock (converting every row
    at claim time cost more than all our other per-message work; `SqlaMessage` gives
    them to handlers as aware UTC). `claimed_at_monotonic` anchors local elapsed time
    to the database's `acquired_at`, so attempt times are reported on the database
    clock without asking it again.
    """

    id: int
    queue: str
    headers: dict[str, Any]
    payload: bytes
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    next_attempt_at: datetime
    acquired_at: datetime | None
    first_attempt_at: datetime | None = None
    last_attempt_at: datetime | None = None
    correlation_id: str | None = None
    claims_count: int = 0
    expires_at: datetime | None = None
    priority: int = 0
    ordering_key: str | None = None
    idempotency_key: str | None = None
    claimed_at_monotonic: float = 0.0
    # the handler's decision, filled while it runs
    decision: AckStatus | None = None
    nack_delay: float | None = None
    #: set for messages handed out by get_one()/iteration, where no worker settles them
    settle: Callable[[ClaimedMessage], Awaitable[None]] | None = field(default=None, repr=False)

    @property
    def keyed(self) -> bool:
        """Has an ordering or idempotency key (on MySQL, a row in the keys table)."""
        return self.ordering_key is not None or self.idempotency_key is not None

    @property
    def token(self) -> int:
        """Fencing token: which claim of the message this is (see dialects.base.Outcome)."""
        return self.claims_count


class SqlaMessage(StreamMessage[ClaimedMessage]):
    """A message consumed from a database queue.

    `ack()`, `nack(delay=None)` and `reject()` record the decision; the outcome is
    written with the next batch flush, after the handler returns.
    """

    @property
    def queue(self) -> str:
        """The queue the message was claimed from."""
        return self.raw_message.queue

    @property
    def attempts_count(self) -> int:
        """Processing attempts before this one."""
        return self.raw_message.attempts_count

    @property
    def deliveries_count(self) -> int:
        """Times this message was claimed, this delivery included."""
        return self.raw_message.deliveries_count

    @property
    def created_at(self) -> datetime:
        """When it was published (aware, UTC)."""
        return to_aware(self.raw_message.created_at)

    @property
    def first_attempt_at(self) -> datetime | None:
        """When its first attempt started; None before any."""
        return to_aware(self.raw_message.first_attempt_at)

    @property
    def last_attempt_at(self) -> datetime | None:
        """When its latest attempt before this one started; None before any."""
        return to_aware(self.raw_message.last_attempt_at)

    @property
    def next_attempt_at(self) -> datetime:
        """The earliest time it was due for this delivery."""
        return to_aware(self.raw_message.next_attempt_at)

    @property
    def acquired_at(self) -> datetime | None:
        """When this delivery claimed it."""
        return to_aware(self.raw_message.acquired_at)

    @property
    def expires_at(self) -> datetime | None:
        """When the message stops being worth handling, if it has such a time."""
        return to_aware(self.raw_message.expires_at)

    @property
    def priority(self) -> int:
        """0-10, higher first."""
        return self.raw_message.priority

    @property
    def ordering_key(self) -> str | None:
        """The key whose messages are handled one at a time, in publish order."""
        return self.raw_message.ordering_key

    async def ack(self) -> None:
        if self.committed is None:
            self.raw_message.decision = AckStatus.ACKED
            await self._settle()
        await super().ack()

    async def nack(self, delay: float | None = None) -> None:
        """Give the message back for another attempt.

        `delay` (seconds) replaces the retry strategy's delay; the strategy's
        `max_attempts` still applies, so a poison message still ends FAILED.
        """
        if delay is not None:
            validate_delay(delay, "nack delay")
        if self.committed is None:
            self.raw_message.decision = AckStatus.NACKED
            self.raw_message.nack_delay = delay
            await self._settle()
        await super().nack()

    async def reject(self) -> None:
        if self.committed is None:
            self.raw_message.decision = AckStatus.REJECTED
            await self._settle()
        await super().reject()

    async def _settle(self) -> None:
        if self.raw_message.settle is not None:
            await self.raw_message.settle(self.raw_message)


class SqlaBatchMessage(StreamMessage[list[ClaimedMessage]]):
    """What a `batch=True` handler's `msg` is: the whole batch.

    `ack()`, `nack(delay=None)` and `reject()` settle every message of the batch that
    was not settled on its own; `messages` holds one `SqlaMessage` per item, for
    per-message decisions (those take precedence). The items are built on first use:
    a handler that settles the batch as a whole never pays for them.
    """

    def __init__(
        self, *args: Any, make_item: Callable[[ClaimedMessage], SqlaMessage], **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._make_item = make_item
        self._messages: list[SqlaMessage] | None = None

    @property
    def messages(self) -> list[SqlaMessage]:
        if self._messages is None:
            self._messages = [self._make_item(raw) for raw in self.raw_message]
        return self._messages

    def _settle_all(self, decision: AckStatus, delay: float | None = None) -> None:
        for raw in self.raw_message:
            if raw.decision is None:
                raw.decision = decision
                if decision is AckStatus.NACKED:
                    raw.nack_delay = delay

    async def ack(self) -> None:
        if self._messages is not None:
            for item in self._messages:
                await item.ack()
        self._settle_all(AckStatus.ACKED)
        await super().ack()

    async def nack(self, delay: float | None = None) -> None:
        if delay is not None:
            validate_delay(delay, "nack delay")
        if self._messages is not None:
            for item in self._messages:
                await item.nack(delay=delay)
        self._settle_all(AckStatus.NACKED, delay)
        await super().nack()

    async def reject(self) -> None:
        if self._messages is not None:
            for item in self._messages:
                await item.reject()
        self._settle_all(AckStatus.REJECTED)
        await super().reject()

