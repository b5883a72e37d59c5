"""The message state machine as pure functions: what a finished delivery writes.

PENDING -> PROCESSING -> COMPLETED | FAILED (archived) | RETRYABLE -> PROCESSING ...
No I/O here, so every transition is tested without a database.
"""

from __future__ import annotations

import traceback
from datetime import datetime, timedelta, timezone

from faststream.message import AckStatus

from .clock import MICROSECOND, to_aware, to_naive_utc
from .drivers.base import Outcome
from .exceptions import MAX_RETRY_DELAY_SECONDS
from .message import ClaimedMessage
from .retry import RetryStrategy
from .schema import MessageState, has_key_row

MAX_ERROR_LENGTH = 8_000


def describe_error(error: BaseException) -> str:
    """The exception's type and message on the first line (what a summary of dead
    letters groups by), then its traceback (causes included); at most
    MAX_ERROR_LENGTH characters.

    When too long, the first line stays and the innermost frames and final line at
    the end; the middle is cut.
    """
    head = f"{type(error).__qualname__}: {error}"[:1000]
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    text = f"{head}\n\n{trace}"
    if len(text) <= MAX_ERROR_LENGTH:
        return text
    marker = "\n ...[truncated]...\n"
    return head + marker + trace[-(MAX_ERROR_LENGTH - len(head) - len(marker)) :]


def db_time(message: ClaimedMessage, monotonic_now: float) -> datetime:
    """Estimate the database clock now, from the claim's acquired_at and local elapsed time."""
    assert message.acquired_at is not None
    # whole microseconds times a unit: cheaper than timedelta(seconds=float), and this
    # runs once per message
    elapsed = monotonic_now - message.claimed_at_monotonic
    return message.acquired_at + MICROSECOND * round(elapsed * 1_000_000)


def _naive(value: datetime | None) -> datetime | None:
    # Claimed times (and those derived from them) are naive UTC already; aware ones
    # come only from callers outside the claim path.
    if value is None or value.tzinfo is None:
        return value
    return value.replace(tzinfo=None) if value.tzinfo is timezone.utc else to_naive_utc(value)


def after_attempt(
    message: ClaimedMessage,
    *,
    started_at: datetime,
    finished_at: datetime,
    error: BaseException | None,
    retry_strategy: RetryStrategy,
) -> Outcome:
    """The outcome of one processing attempt, from the handler's recorded decision.

    No decision (AckPolicy.MANUAL and the handler settled nothing) counts as a nack:
    an unsettled message is never silently dropped. An acknowledged attempt does not
    look at `finished_at`.
    """
    if message.deferred:
        return deferred(message, started_at=started_at, finished_at=finished_at)
    attempts = message.attempts_count + 1
    started = _naive(started_at)
    first = _naive(message.first_attempt_at) or started
    last_error = describe_error(error) if error is not None else None
    decision = message.decision or AckStatus.NACKED

    def outcome(state: MessageState, next_attempt_at: datetime | None = None) -> Outcome:
        return Outcome(
            message.id,
            message.token,
            state,
            attempts,
            message.deliveries_count,
            first,
            started,
            next_attempt_at,
            last_error,
            message.keyed,
        )

    if decision is AckStatus.ACKED or decision is AckStatus.REJECTED:
        state = MessageState.COMPLETED if decision is AckStatus.ACKED else MessageState.FAILED
        return outcome(state)

    finished = to_aware(finished_at)
    first_aware = to_aware(first)
    assert finished is not None and first_aware is not None
    next_at = retry_strategy.get_next_attempt_at(
        first_attempt_at=first_aware, last_attempt_at=finished, attempts_count=attempts
    )
    if next_at is not None and message.nack_delay is not None:
        next_at = finished + timedelta(seconds=min(message.nack_delay, MAX_RETRY_DELAY_SECONDS))
        limit = retry_strategy.max_total_delay_seconds
        if limit is not None and next_at > first_aware + timedelta(seconds=limit):
            next_at = None
    if next_at is None:
        return outcome(MessageState.FAILED)
    return outcome(MessageState.RETRYABLE, _naive(next_at))


def deferred(message: ClaimedMessage, *, started_at: datetime, finished_at: datetime) -> Outcome:
    """Deferred by its handler (SqlaMessage.defer): PENDING again after the delay, with
    the attempt count it came with and its last error kept; only the handler's run is
    recorded (last_attempt_at), and the state it saved."""
    finished = _naive(finished_at)
    assert finished is not None
    delay = min(message.nack_delay or 0.0, MAX_RETRY_DELAY_SECONDS)
    return Outcome(
        message.id,
        message.token,
        MessageState.PENDING,
        message.attempts_count,
        message.deliveries_count,
        _naive(message.first_attempt_at),
        _naive(started_at),
        finished + timedelta(seconds=delay),
        None,
        message.keyed,
        message.new_state,
    )


def completed(message: ClaimedMessage, started_at: datetime) -> Outcome:
    """What `after_attempt` gives an acknowledged attempt that raised nothing, for a
    message as claimed (its times naive UTC, as `started_at` must be too): the common
    case, kept short because it runs once per message."""
    # the fields behind the `token` and `keyed` properties, read directly: this is the
    # one outcome every plain message gets
    return Outcome(
        message.id,
        message.claims_count,
        MessageState.COMPLETED,
        message.attempts_count + 1,
        message.deliveries_count,
        message.first_attempt_at or started_at,
        started_at,
        None,
        None,
        has_key_row(message.ordering_key, message.idempotency_key, message.channel),
    )


def is_expired(message: ClaimedMessage, monotonic_now: float) -> bool:
    """Whether the message's expires_at has passed, on the database clock."""
    return message.expires_at is not None and message.expires_at <= db_time(message, monotonic_now)


def settled_unhandled(
    message: ClaimedMessage, state: MessageState, last_error: str | None = None
) -> Outcome:
    """Settled without running the handler: no attempt is spent or recorded."""
    return Outcome(
        id=message.id,
        token=message.token,
        state=state,
        attempts_count=message.attempts_count,
        deliveries_count=message.deliveries_count,
        first_attempt_at=_naive(message.first_attempt_at),
        last_attempt_at=_naive(message.last_attempt_at),
        last_error=last_error,
        keyed=message.keyed,
    )


def expired(message: ClaimedMessage) -> Outcome:
    """Past its expires_at before a handler got it: archived EXPIRED."""
    return settled_unhandled(message, MessageState.EXPIRED)


def deliveries_exceeded(message: ClaimedMessage, max_deliveries: int) -> Outcome:
    """Poison-message protection: FAILED without running the handler."""
    return settled_unhandled(
        message,
        MessageState.FAILED,
        f"max_deliveries exceeded: delivered {message.deliveries_count} times, "
        f"limit {max_deliveries}",
    )


def before_handler(
    message: ClaimedMessage, max_deliveries: int | None, monotonic_now: float
) -> Outcome | None:
    """The outcome of a claimed message that must not reach its handler: delivered
    more than `max_deliveries` times (a poison message), or expired. None: it may run.
    Every path to a handler (one message, a batch, a pull) asks here."""
    if max_deliveries is not None and message.deliveries_count > max_deliveries:
        return deliveries_exceeded(message, max_deliveries)
    if message.expires_at is not None and is_expired(message, monotonic_now):
        return expired(message)
    return None


def split_before_handler(
    batch: list[ClaimedMessage], max_deliveries: int | None, monotonic_now: float
) -> tuple[list[ClaimedMessage], list[Outcome]]:
    """`before_handler` for a batch: the messages that may run, and the outcomes of
    those that must not. Asks per message only of those that could be held back."""
    if max_deliveries is None and [m.expires_at for m in batch].count(None) == len(batch):
        return batch, []  # nothing delivered too often, nothing that can expire
    live: list[ClaimedMessage] = []
    settled: list[Outcome] = []
    for message in batch:
        if (outcome := before_handler(message, max_deliveries, monotonic_now)) is not None:
            settled.append(outcome)
        else:
            live.append(message)
    return live, settled


def released(message: ClaimedMessage, *, started: bool) -> Outcome:
    """Back to PENDING at shutdown, spending no attempt.

    A message that never reached a handler does not count as delivered either;
    one whose handler was cancelled mid-way keeps its delivery (it was delivered).
    """
    return Outcome(
        id=message.id,
        token=message.token,
        state=MessageState.PENDING,
        attempts_count=message.attempts_count,
        deliveries_count=message.deliveries_count - (0 if started else 1),
        first_attempt_at=_naive(message.first_attempt_at),
        last_attempt_at=_naive(message.last_attempt_at),
        keyed=message.keyed,
    )
