"""What the admin API returns: plain dataclasses, times aware UTC, ready for JSON
(`to_json`)."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from faststream_sqla.channels.limits import Rate

#: called as work advances: (done so far, total if known)
Progress = Callable[[int, "int | None"], None]


@dataclass(frozen=True)
class Count:
    """A count that stops at a cap so its cost does not grow with the table: `value` is
    exact when `exact`, else a lower bound (the cap: "at least this many")."""

    value: int
    exact: bool = True

    def __str__(self) -> str:
        return f"{self.value:,}" if self.exact else f"{self.value:,}+"


@dataclass(frozen=True)
class ReplicaLag:
    """How far the replica an admin reads from (`read_url`) is behind its primary:
    `seconds`, 0 when it has replayed all it received; None when it cannot tell (its
    replication stopped, or a database without replicas)."""

    seconds: float | None

    def __str__(self) -> str:
        if self.seconds is None:
            return "read from replica, lag unknown (is its replication running?)"
        return f"read from replica, {self.seconds:.0f} s behind"


@dataclass(frozen=True)
class Throughput:
    """A queue's messages archived (any final state) in each of `len(archived)` spans
    of `span_seconds`, oldest first, the last ending now: a sparkline's points."""

    queue: str
    span_seconds: int
    archived: list[Count]


@dataclass(frozen=True)
class QueueStats:
    queue: str
    #: due now: a claim may take them (new messages, and retries whose time came)
    ready: Count
    #: published with a delay, not yet due
    scheduled: Count
    processing: Count
    #: failed an attempt, waiting out their backoff (RETRYABLE, not yet due)
    retrying: Count
    #: behind an earlier message of their ordering key (WAITING)
    waiting: Count
    failed_last_hour: Count
    #: seconds since the oldest ready message became due; None when none is ready
    oldest_ready_age: float | None
    #: messages archived (any outcome) in the last minute
    handled_last_minute: Count
    #: messages archived FAILED (dead letters) in the last minute
    failed_last_minute: Count


@dataclass(frozen=True)
class Attempt:
    """One HTTP request of a webhook delivery: its response status (None when no
    response came: `error` says why), latency in seconds, and the response body's
    first 4 KiB."""

    message_id: int
    endpoint: str
    attempt: int
    at: datetime
    status: int | None
    latency: float
    error: str | None
    response_body: str | None


@dataclass(frozen=True)
class MessageDetails:
    """One message, live (`archived` False) or archived."""

    id: int
    queue: str
    state: str
    archived: bool
    headers: dict[str, Any]
    payload: bytes
    correlation_id: str | None
    priority: int
    ordering_key: str | None
    #: the channel whose limits it waits for (docs/flow-control.md#channels)
    channel: str | None
    idempotency_key: str | None
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    expires_at: datetime | None
    last_error: str | None
    #: live messages only
    next_attempt_at: datetime | None = None
    acquired_at: datetime | None = None
    #: archived messages only
    archived_at: datetime | None = None
    #: the audit trail of redrive and replay
    redriven_from: int | None = None
    redriven_to: int | None = None
    #: PROCESSING messages only: the worker (`WorkerInfo.worker_id`) whose last refresh
    #: listed it as held; None until that refresh (`QueueAdmin.workers`)
    held_by: str | None = None
    #: the topic it was published to, this queue one of those bound to it
    #: (docs/topics.md); None for a publish to the queue
    topic: str | None = None
    #: live messages only: what a handler saved when it deferred it (SqlaMessage.defer),
    #: as it gave it (JSON values decoded, bytes as bytes); None when nothing was saved
    saved_state: Any = None
    #: a webhook delivery's HTTP attempts, oldest first (docs/webhooks.md)
    webhook_attempts: list[Attempt] = field(default_factory=list)


@dataclass(frozen=True)
class DeadLetter:
    """An archived message that did not complete: FAILED or EXPIRED."""

    id: int
    queue: str
    state: str
    attempts_count: int
    archived_at: datetime
    last_error: str | None
    correlation_id: str | None


@dataclass(frozen=True)
class DeadLetterPage:
    items: list[DeadLetter]
    #: pass as `after` for the next page; None on the last one
    next_page: str | None


@dataclass(frozen=True)
class LiveMessage:
    """A message of a queue's live table, as `messages` lists it."""

    id: int
    queue: str
    #: ready, scheduled, retrying, processing or waiting (`MESSAGE_LIST_STATES`)
    state: str
    priority: int
    channel: str | None
    ordering_key: str | None
    correlation_id: str | None
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    #: when it is due (ready: when it became due)
    next_attempt_at: datetime | None
    last_error: str | None
    #: processing messages only: the worker that holds it, as `MessageDetails.held_by`
    held_by: str | None = None


@dataclass(frozen=True)
class MessagePage:
    items: list[LiveMessage]
    #: pass as `after` for the next page; None on the last one
    next_page: str | None


@dataclass(frozen=True)
class ErrorCount:
    error: str
    count: int


@dataclass(frozen=True)
class DeadLetterSummary:
    queue: str
    count: Count
    oldest: datetime
    newest: datetime
    #: the most common first lines of last_error among the newest dead letters
    #: (`SAMPLE_SIZE` of them), most common first
    common_errors: list[ErrorCount] = field(default_factory=list)


@dataclass(frozen=True)
class MoveResult:
    """What a redrive or replay did: `moved` maps each archived id to its new message's
    id."""

    moved: dict[int, int]
    #: ids asked for by id that were not moved, with why
    skipped: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Binding:
    """Messages published to a topic `pattern` matches are copied into `queue`
    (docs/topics.md)."""

    pattern: str
    queue: str
    created_at: datetime


@dataclass(frozen=True)
class TopicRoute:
    """Where a message published to a topic goes now: the bound `queues` and the
    enabled webhook `endpoints` whose patterns match it, each by name."""

    queues: list[str]
    endpoints: list[str]


@dataclass(frozen=True)
class Endpoint:
    """An HTTP endpoint that receives webhooks (docs/webhooks.md). `secret_hint` is the
    start of its secret, enough to tell two apart; the secret itself is shown only when
    it is made (`NewSecret`). Of its extra request headers only the names are shown:
    their values often hold a credential. Its limits and breaker are those of its
    channel of the delivery queue (`QueueAdmin.channels`)."""

    name: str
    url: str
    topics: tuple[str, ...]
    secret_hint: str
    rotating: bool  # a previous secret is still valid, and signed with too
    timeout: float
    header_names: tuple[str, ...]
    allow_private: bool
    retry_schedule: tuple[float, ...]
    disabled_at: datetime | None
    disabled_reason: str | None
    created_at: datetime


@dataclass(frozen=True)
class NewSecret:
    """An endpoint's secret, returned once when it is made: give it to the receiver."""

    endpoint: str
    secret: str = field(repr=False)

    def __str__(self) -> str:
        return f"secret of endpoint {self.endpoint!r}"


@dataclass(frozen=True)
class ScheduleInfo:
    """One interval or cron schedule (docs/schedules.md)."""

    name: str
    queue: str
    #: "interval" (every_seconds) or "cron" (cron, read in timezone)
    kind: str
    every_seconds: float | None
    cron: str | None
    timezone: str | None
    #: "skip" or "catch_up" (up to catch_up_limit ticks)
    missed: str
    catch_up_limit: int
    paused: bool
    next_fire_at: datetime
    last_fired_at: datetime | None
    fired_count: int
    created_at: datetime
    updated_at: datetime
    #: the encoded body, headers and delivery options of the messages it publishes
    payload: bytes
    headers: dict[str, Any]
    options: dict[str, Any]


@dataclass(frozen=True)
class BreakerTransition:
    """One change of a circuit breaker's state, with why."""

    id: int
    from_state: str
    to_state: str
    #: "3 consecutive failures", "cooldown over", "probe succeeded", "probe failed",
    #: "probe holder stopped", "probe holder silent", "manual reset", and for a
    #: channel's own breaker "probe ended without a verdict"
    reason: str
    at: datetime


@dataclass(frozen=True)
class BreakerStatus:
    """A queue's circuit breaker, or one of its channels', as every process sees it
    (docs/flow-control.md)."""

    queue: str
    #: CLOSED, OPEN or HALF_OPEN
    state: str
    consecutive_failures: int
    #: when it last changed state; None if it never did
    changed_at: datetime | None
    #: when an OPEN breaker lets a probe through (the last opening's, once it reopened)
    reopens_at: datetime | None
    #: the subscriber instance that holds the probe while HALF_OPEN (host:pid:id); a
    #: channel's probe is whichever message its claim let through, held by no one
    probe_holder: str | None
    #: its last changes of state, newest first
    recent: list[BreakerTransition] = field(default_factory=list)
    #: the channel whose own breaker this is (`circuit_breaker_per_channel`); None for
    #: the queue's
    channel: str | None = None


@dataclass(frozen=True)
class QueueLimits:
    """What an operator set on a queue (`QueueAdmin.set_queue_limits`, `pause_queue`);
    None: no limit."""

    queue: str
    #: messages of the queue in flight at once, across every process and channel
    max_concurrency: int | None
    #: claims of the queue's messages, across every process and channel
    rate: Rate | None
    #: each channel's max_concurrency, unless the channel sets its own
    channel_max_concurrency: int | None
    #: each channel's rate, unless the channel sets its own
    channel_rate: Rate | None
    paused: bool


@dataclass(frozen=True)
class ChannelStatus:
    """One channel of a queue: its messages now, and its limits (`QueueAdmin.channels`).
    The queue's own `max_concurrency` and rate hold across all its channels besides."""

    name: str
    #: due now, waiting for the channel's turn and room
    ready: int
    #: claimed by a worker (PROCESSING): what counts against max_concurrency
    in_flight: int
    #: live but not yet due: published with a delay, waiting out a retry's backoff, or
    #: behind an earlier message of their ordering key
    later: int
    #: claims of this channel stopped (`QueueAdmin.pause_channel`)
    paused: bool
    #: the channel's own limits, None where it sets none
    max_concurrency: int | None
    rate: Rate | None
    #: the limits that apply: its own, else the queue's defaults for its channels (a
    #: group's row: its own only)
    effective_max_concurrency: int | None
    effective_rate: Rate | None
    #: the group it belongs to (its name up to the first "/"), whose limits hold
    #: beside its own; for a group's own row (a name ending in "/"), itself
    group: str | None = None


@dataclass(frozen=True)
class WorkerInfo:
    """A broker process, as its row in the workers table says (`QueueAdmin.workers`)."""

    #: random, made when the broker started
    worker_id: str
    host: str
    pid: int
    #: the queues its subscribers consume (none for a broker that only publishes)
    queues: list[str]
    #: its faststream-sqla version
    version: str
    started_at: datetime
    #: its last refresh, by the database clock
    last_seen: datetime
    #: seconds since last_seen when read, by the database clock
    silent_for: float
    #: "alive", or "gone": silent for longer than `gone_after`
    status: str
    #: the silence, in seconds, after which it counts as gone
    gone_after: float
    #: handlers running at last_seen
    in_flight: int
    #: the ids of the messages it held at last_seen (claimed, not yet settled)
    holding: list[int]


def to_json(value: Any) -> Any:
    """`value` (a result of this API, or a list of them) as JSON-ready data: times in
    ISO 8601, payloads base64 (and as text when they are UTF-8), rates as their count,
    period in seconds and text (`{"count": 5, "period": 1.0, "text": "5/s"}`)."""
    if isinstance(value, Rate):
        return {"count": value.count, "period": value.period, "text": str(value)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if isinstance(item, bytes):
                out[f"{f.name}_base64"] = base64.b64encode(item).decode()
                try:
                    out[f"{f.name}_text"] = item.decode()
                except UnicodeDecodeError:
                    out[f"{f.name}_text"] = None
            else:
                out[f.name] = to_json(item)
        return out
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value
