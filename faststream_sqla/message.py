"""The message a handler receives, and the claimed row behind it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from faststream.message import AckStatus, StreamMessage

from .clock import to_aware
from .durations import Seconds, plain_seconds
from .exceptions import InvalidOptionError, shown
from .schema import has_key_row

if TYPE_CHECKING:
    from .drivers.base import Outcome


#: the header that carries the topic a message was published to (SqlaMessage.topic): a
#: claim reads headers already, and a column of its own would cost every claim
TOPIC_HEADER = "x-topic"

#: ten years: a longer wait is a mistake, and would overflow datetime arithmetic
MAX_NACK_DELAY_SECONDS = 10 * 365 * 24 * 3600


def validate_delay(delay: object, what: str = "delay") -> float:
    """A delay in seconds (a number or a timedelta): finite, not negative, at most ten
    years."""
    delay = plain_seconds(delay)
    if (
        isinstance(delay, bool)
        or not isinstance(delay, (int, float))
        or not 0 <= delay <= MAX_NACK_DELAY_SECONDS
    ):
        msg = f"{what} must be 0 to {MAX_NACK_DELAY_SECONDS} seconds, got {shown(delay)}"
        raise InvalidOptionError(msg)
    return float(delay)


#: a deferral's saved state, encoded, may be this large; bigger data belongs in the
#: application's own tables, with a reference to it in the state
MAX_SAVED_STATE_BYTES = 1024 * 1024
#: the first byte of a stored state says how the rest is encoded
_BYTES_TAG, _JSON_TAG = b"B", b"J"


class _Keep:
    """The saved state is left as it is (`defer()` without `state=`)."""

    def __repr__(self) -> str:
        return "KEEP_STATE"


KEEP_STATE: Any = _Keep()


def encode_saved_state(state: Any) -> bytes | None:
    """`state` as stored: None clears it; bytes are kept as given; anything else is
    stored as JSON. InvalidOptionError for what JSON cannot hold or what is too big."""
    if state is None:
        return None
    if isinstance(state, (bytes, bytearray, memoryview)):
        data = _BYTES_TAG + bytes(state)
    else:
        try:
            text = json.dumps(state, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            msg = f"state must be bytes or JSON-serialisable, got {type(state).__name__}: {exc}"
            raise InvalidOptionError(msg) from None
        data = _JSON_TAG + text.encode()
    if len(data) - 1 > MAX_SAVED_STATE_BYTES:
        msg = (
            f"state is {len(data) - 1} bytes encoded, the limit is {MAX_SAVED_STATE_BYTES}: "
            "keep large data in your own tables and save a reference to it"
        )
        raise InvalidOptionError(msg)
    return data


def decode_saved_state(stored: Any) -> Any:
    """What `encode_saved_state` stored, back as given (JSON decoded)."""
    if stored is None:
        return None
    data = bytes(stored)
    if data[:1] == _JSON_TAG:
        return json.loads(data[1:])
    return data[1:]


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
    channel: str | None = None
    #: what the last deferral saved, as stored (decode_saved_state reads it)
    saved_state: bytes | None = None
    claimed_at_monotonic: float = 0.0
    # the handler's decision, filled while it runs
    decision: AckStatus | None = None
    nack_delay: float | None = None
    #: nacked by defer(): back to PENDING without spending an attempt
    deferred: bool = False
    #: the state defer() saves (encoded), or KEEP_STATE
    new_state: Any = KEEP_STATE
    #: set for messages handed out by get_one()/iteration, where no worker settles them
    settle: Callable[[ClaimedMessage], Awaitable[None]] | None = field(default=None, repr=False)
    #: told what this delivery ended with once the subscriber has decided it (None: it
    #: was put back unsettled); set by observers such as the tracing middleware
    on_outcome: Callable[[Outcome | None], None] | None = field(default=None, repr=False)

    @property
    def keyed(self) -> bool:
        """Has an ordering or idempotency key or a channel (on MySQL, a row in the keys
        table)."""
        return has_key_row(self.ordering_key, self.idempotency_key, self.channel)

    @property
    def token(self) -> int:
        """Fencing token: which claim of the message this is (see drivers.base.Outcome)."""
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

    @property
    def channel(self) -> str | None:
        """The channel whose limits the message was claimed under, if any."""
        return self.raw_message.channel

    @property
    def topic(self) -> str | None:
        """The topic the message was published to (this queue got a copy as one of
        the queues bound to it); None for a publish to the queue itself."""
        topic = self.raw_message.headers.get(TOPIC_HEADER)
        return topic if isinstance(topic, str) else None

    async def ack(self) -> None:
        if self.committed is None:
            self.raw_message.decision = AckStatus.ACKED
            await self._settle()
        await super().ack()

    async def nack(self, delay: Seconds | None = None) -> None:
        """Give the message back for another attempt.

        `delay` (seconds or a timedelta) replaces the retry strategy's delay; the strategy's
        `max_attempts` still applies, so a poison message still ends FAILED.
        """
        seconds = None if delay is None else validate_delay(delay, "nack delay")
        if self.committed is None:
            self.raw_message.decision = AckStatus.NACKED
            self.raw_message.nack_delay = seconds
            await self._settle()
        await super().nack()

    async def reject(self) -> None:
        if self.committed is None:
            self.raw_message.decision = AckStatus.REJECTED
            await self._settle()
        await super().reject()

    @property
    def state(self) -> Any:
        """What the handler saved when it last deferred this message (`defer(state=...)`):
        bytes as given, anything else as decoded JSON; None if nothing was saved."""
        return decode_saved_state(self.raw_message.saved_state)

    async def defer(self, delay: Seconds = 0.0, *, state: Any = KEEP_STATE) -> None:
        """Give the message back to the queue for later, as a step of longer work rather
        than a failure: no attempt is spent, the retry strategy is not consulted and the
        message keeps its row, its id and its place among its ordering key's messages.

        `delay` (seconds or a timedelta) is how long it waits before it may be claimed
        again. `state` (bytes, or anything JSON can hold, up to 1 MiB encoded) is saved
        with it and read by the next delivery as `msg.state`; None clears it; leave it
        out to keep what was saved before. The state is written with the outcome, after
        the handler returns, and fenced like it: a process whose claim lapsed saves
        nothing.
        """
        seconds = validate_delay(delay, "defer delay")
        encoded = KEEP_STATE if state is KEEP_STATE else encode_saved_state(state)
        if self.committed is None:
            raw = self.raw_message
            raw.decision, raw.nack_delay = AckStatus.NACKED, seconds
            raw.deferred, raw.new_state = True, encoded
            await self._settle()
        await super().nack()

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

    async def nack(self, delay: Seconds | None = None) -> None:
        seconds = None if delay is None else validate_delay(delay, "nack delay")
        if self._messages is not None:
            for item in self._messages:
                await item.nack(delay=seconds)
        self._settle_all(AckStatus.NACKED, seconds)
        await super().nack()

    async def reject(self) -> None:
        if self._messages is not None:
            for item in self._messages:
                await item.reject()
        self._settle_all(AckStatus.REJECTED)
        await super().reject()
