"""What the dashboard's HTTP API answers and takes: pydantic models, so that FastAPI
checks the requests and describes both in the OpenAPI document. Built from the admin
API's results (`faststream_sqla.admin`), which stay plain dataclasses."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from faststream_sqla.admin import (
    BreakerStatus,
    BreakerTransition,
    ChannelStatus,
    Count,
    DeadLetter,
    DeadLetterSummary,
    LiveMessage,
    MessageDetails,
    MoveResult,
    QueueLimits,
    QueueStats,
    ReplicaLag,
    ScheduleInfo,
    Throughput,
    WorkerInfo,
)
from faststream_sqla.channels.limits import Rate

#: ids one redrive or replay by ids takes; more go by a filter
MAX_IDS = 10_000
#: the longest text a filter field takes (as the admin API's filters)
MAX_TEXT = 1000
#: the largest message id (the id columns are 64-bit)
MAX_MESSAGE_ID = 2**63 - 1
MessageId = Annotated[int, Field(ge=1, le=MAX_MESSAGE_ID)]


class Strict(BaseModel):
    """A request body: unknown fields are refused (a typo must not widen a move)."""

    model_config = ConfigDict(extra="forbid")


class ErrorBody(BaseModel):
    """Every error: what went wrong, in one sentence."""

    error: str


class CountBody(BaseModel):
    """A count that stops at the admin API's cap: exact, or "at least `value`"."""

    value: int
    exact: bool

    @classmethod
    def of(cls, count: Count) -> CountBody:
        return cls(value=count.value, exact=count.exact)


class Body(BaseModel):
    """Bytes as shown: the text when they are UTF-8, else base64; `encoding` says which."""

    encoding: Literal["text", "base64"]
    data: str

    @classmethod
    def of(cls, raw: bytes) -> Body:
        try:
            return cls(encoding="text", data=raw.decode())
        except UnicodeDecodeError:
            return cls(encoding="base64", data=base64.b64encode(raw).decode())


class RateBody(BaseModel):
    """At most `count` claims in any `period` seconds; `text` as the CLI writes it."""

    count: int
    period: float
    text: str

    @classmethod
    def of(cls, rate: Rate | None) -> RateBody | None:
        return None if rate is None else cls(count=rate.count, period=rate.period, text=str(rate))


class ReplicaBanner(BaseModel):
    """Figures read from a replica (`read_url`): how far behind its primary it is, and
    the line a page shows above them."""

    lag_seconds: float | None = Field(description="null: the replica cannot tell")
    text: str

    @classmethod
    def of(cls, lag: ReplicaLag | None) -> ReplicaBanner | None:
        return None if lag is None else cls(lag_seconds=lag.seconds, text=str(lag))


class Info(BaseModel):
    """What this dashboard serves: the database (password masked), read-only or not,
    and the replica its figures are read from, if any."""

    database: str
    read_only: bool
    version: str
    replica: ReplicaBanner | None = Field(description="null: figures read from the primary")


# -- queues ---------------------------------------------------------------------------


class QueueCounts(BaseModel):
    ready: CountBody
    scheduled: CountBody
    processing: CountBody
    retrying: CountBody
    waiting: CountBody


class QueueOverview(BaseModel):
    """One queue: its messages by state, its throughput, its controls."""

    queue: str
    counts: QueueCounts
    handled_per_minute: CountBody = Field(description="archived, any outcome, last minute")
    failed_per_minute: CountBody = Field(description="archived FAILED, last minute")
    failed_last_hour: CountBody
    oldest_ready_age: float | None = Field(description="seconds; null when none is ready")
    paused: bool
    breaker: str = Field(description="the queue's circuit breaker: CLOSED, OPEN or HALF_OPEN")

    @classmethod
    def of(cls, stats: QueueStats, *, paused: bool, breaker: str) -> QueueOverview:
        return cls(
            queue=stats.queue,
            counts=QueueCounts(
                ready=CountBody.of(stats.ready),
                scheduled=CountBody.of(stats.scheduled),
                processing=CountBody.of(stats.processing),
                retrying=CountBody.of(stats.retrying),
                waiting=CountBody.of(stats.waiting),
            ),
            handled_per_minute=CountBody.of(stats.handled_last_minute),
            failed_per_minute=CountBody.of(stats.failed_last_minute),
            failed_last_hour=CountBody.of(stats.failed_last_hour),
            oldest_ready_age=stats.oldest_ready_age,
            paused=paused,
            breaker=breaker,
        )


class QueueList(BaseModel):
    queues: list[QueueOverview]
    replica: ReplicaBanner | None = Field(description="null: figures read from the primary")


class ThroughputBody(BaseModel):
    """A queue's messages archived in each span of `span_seconds`, oldest first, the
    last span ending now."""

    queue: str
    span_seconds: int
    archived: list[CountBody]

    @classmethod
    def of(cls, found: Throughput) -> ThroughputBody:
        archived = [CountBody.of(c) for c in found.archived]
        return cls(queue=found.queue, span_seconds=found.span_seconds, archived=archived)


class Changed(BaseModel):
    """A pause, resume or reset: whether it changed anything."""

    changed: bool


class Purged(BaseModel):
    deleted: int


# -- messages -------------------------------------------------------------------------


class MessageRow(BaseModel):
    """A live message as a page lists it."""

    id: int
    queue: str
    state: str
    priority: int
    channel: str | None
    ordering_key: str | None
    correlation_id: str | None
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    next_attempt_at: datetime | None
    last_error: str | None
    held_by: str | None = Field(
        default=None, description="PROCESSING only: the worker whose last refresh listed it"
    )

    @classmethod
    def of(cls, message: LiveMessage) -> MessageRow:
        return cls(**message.__dict__)


class MessageRows(BaseModel):
    items: list[MessageRow]
    next_page: str | None = Field(description="pass as `before` for the next page")


class SavedState(BaseModel):
    """What a handler saved when it deferred the message: a JSON value, or bytes."""

    json_value: Any = None
    body: Body | None = None


class WebhookAttempt(BaseModel):
    """One HTTP request of a webhook delivery."""

    attempt: int
    at: datetime
    status: int | None = Field(description="None when no response came: see error")
    latency: float = Field(description="seconds")
    error: str | None
    response_body: str | None = Field(description="its first 4 KiB")


class MessageDetail(BaseModel):
    """One message, live or archived, in full."""

    id: int
    queue: str
    state: str
    archived: bool
    headers: dict[str, Any]
    body: Body
    correlation_id: str | None
    priority: int
    ordering_key: str | None
    channel: str | None
    idempotency_key: str | None
    attempts_count: int
    deliveries_count: int
    created_at: datetime
    first_attempt_at: datetime | None
    last_attempt_at: datetime | None
    expires_at: datetime | None
    last_error: str | None
    next_attempt_at: datetime | None
    acquired_at: datetime | None
    archived_at: datetime | None
    redriven_from: int | None
    redriven_to: int | None
    saved_state: SavedState | None
    held_by: str | None = Field(
        default=None, description="PROCESSING only: the worker whose last refresh listed it"
    )
    topic: str | None = Field(default=None, description="the topic it was published to")
    webhook_attempts: list[WebhookAttempt] = Field(
        default_factory=list, description="a webhook delivery's HTTP attempts, oldest first"
    )

    @classmethod
    def of(cls, found: MessageDetails) -> MessageDetail:
        fields = dict(found.__dict__)
        payload, state = fields.pop("payload"), fields.pop("saved_state")
        fields["webhook_attempts"] = [
            WebhookAttempt(
                attempt=a.attempt, at=a.at, status=a.status, latency=a.latency,
                error=a.error, response_body=a.response_body,
            )
            for a in found.webhook_attempts
        ]  # fmt: skip
        saved = None
        if isinstance(state, bytes):
            saved = SavedState(body=Body.of(state))
        elif state is not None:
            saved = SavedState(json_value=state)
        return cls(**fields, body=Body.of(payload), saved_state=saved)


# -- dead letters, redrive and replay -------------------------------------------------


class DeadLetterRow(BaseModel):
    id: int
    queue: str
    state: str
    attempts_count: int
    archived_at: datetime
    last_error: str | None
    correlation_id: str | None

    @classmethod
    def of(cls, found: DeadLetter) -> DeadLetterRow:
        return cls(**found.__dict__)


class DeadLetterRows(BaseModel):
    items: list[DeadLetterRow]
    next_page: str | None = Field(description="pass as `after` for the next page")


class ErrorCountBody(BaseModel):
    error: str
    count: int


class DeadLetterQueueSummary(BaseModel):
    queue: str
    count: CountBody
    oldest: datetime
    newest: datetime
    common_errors: list[ErrorCountBody]

    @classmethod
    def of(cls, found: DeadLetterSummary) -> DeadLetterQueueSummary:
        return cls(
            queue=found.queue,
            count=CountBody.of(found.count),
            oldest=found.oldest,
            newest=found.newest,
            common_errors=[
                ErrorCountBody(error=e.error, count=e.count) for e in found.common_errors
            ],
        )


class DeadLetterSummaries(BaseModel):
    queues: list[DeadLetterQueueSummary]


Text = Field(default=None, min_length=1, max_length=MAX_TEXT)


class RedriveRequest(Strict):
    """Either `ids`, or a filter: one `queue` or `all` queues, and optionally an
    `error` the last errors start with. A filter answers with the number it would move
    unless `confirm` is true."""

    ids: list[MessageId] | None = Field(default=None, min_length=1, max_length=MAX_IDS)
    queue: str | None = Text
    error: str | None = Text
    all: bool = False
    confirm: bool = False


class ReplayRequest(RedriveRequest):
    """As a redrive, over every final state (or `states`) and a time range."""

    states: list[str] | None = Field(default=None, min_length=1, max_length=4)
    since: datetime | None = None
    until: datetime | None = None


class MoveAnswer(BaseModel):
    """A move done (`moved`: archived id to new id, `skipped` with why), or for an
    unconfirmed filter, the number it would move (`would_move`) and nothing done."""

    confirmed: bool
    would_move: CountBody | None = None
    moved: dict[str, int] = Field(default_factory=dict)
    skipped: dict[str, str] = Field(default_factory=dict)

    @classmethod
    def done(cls, result: MoveResult) -> MoveAnswer:
        return cls(
            confirmed=True,
            moved={str(k): v for k, v in result.moved.items()},
            skipped={str(k): v for k, v in result.skipped.items()},
        )

    @classmethod
    def preview(cls, count: Count) -> MoveAnswer:
        return cls(confirmed=False, would_move=CountBody.of(count))


# -- channels, breakers, schedules ----------------------------------------------------


class ChannelRow(BaseModel):
    name: str
    ready: int
    in_flight: int
    later: int
    paused: bool
    max_concurrency: int | None
    rate: RateBody | None
    effective_max_concurrency: int | None
    effective_rate: RateBody | None
    group: str | None

    @classmethod
    def of(cls, found: ChannelStatus) -> ChannelRow:
        fields = dict(found.__dict__)
        fields["rate"] = RateBody.of(found.rate)
        fields["effective_rate"] = RateBody.of(found.effective_rate)
        return cls(**fields)


class QueueLimitsBody(BaseModel):
    queue: str
    max_concurrency: int | None
    rate: RateBody | None
    channel_max_concurrency: int | None
    channel_rate: RateBody | None
    paused: bool

    @classmethod
    def of(cls, found: QueueLimits) -> QueueLimitsBody:
        return cls(
            queue=found.queue,
            max_concurrency=found.max_concurrency,
            rate=RateBody.of(found.rate),
            channel_max_concurrency=found.channel_max_concurrency,
            channel_rate=RateBody.of(found.channel_rate),
            paused=found.paused,
        )


class Channels(BaseModel):
    queue: QueueLimitsBody
    channels: list[ChannelRow]


class LimitsRequest(Strict):
    """New limits: a field left out stays as it is, null removes the limit. A rate is
    "5/s", "100/min", "10/30s"."""

    max_concurrency: int | None = Field(default=None, ge=1, le=1_000_000)
    rate: str | None = Field(default=None, min_length=1, max_length=100)


class QueueLimitsRequest(LimitsRequest):
    """A queue's own limits, and its defaults for each channel without limits of its
    own; as for a channel, a field left out stays, null removes it."""

    channel_max_concurrency: int | None = Field(default=None, ge=1, le=1_000_000)
    channel_rate: str | None = Field(default=None, min_length=1, max_length=100)


class TransitionBody(BaseModel):
    id: int
    from_state: str
    to_state: str
    reason: str
    at: datetime

    @classmethod
    def of(cls, found: BreakerTransition) -> TransitionBody:
        return cls(**found.__dict__)


class BreakerBody(BaseModel):
    queue: str
    channel: str | None
    state: str
    consecutive_failures: int
    changed_at: datetime | None
    reopens_at: datetime | None
    probe_holder: str | None
    recent: list[TransitionBody]

    @classmethod
    def of(cls, found: BreakerStatus) -> BreakerBody:
        fields = dict(found.__dict__)
        fields["recent"] = [TransitionBody.of(t) for t in found.recent]
        return cls(**fields)


class Breakers(BaseModel):
    breakers: list[BreakerBody]


class ScheduleBody(BaseModel):
    name: str
    queue: str
    kind: str
    every_seconds: float | None
    cron: str | None
    timezone: str | None
    missed: str
    catch_up_limit: int
    paused: bool
    next_fire_at: datetime
    last_fired_at: datetime | None
    fired_count: int
    created_at: datetime
    updated_at: datetime
    body: Body
    headers: dict[str, Any]
    options: dict[str, Any]

    @classmethod
    def of(cls, found: ScheduleInfo) -> ScheduleBody:
        fields = dict(found.__dict__)
        fields["body"] = Body.of(fields.pop("payload"))
        return cls(**fields)


class Schedules(BaseModel):
    schedules: list[ScheduleBody]


# -- workers --------------------------------------------------------------------------


class WorkerBody(BaseModel):
    """A broker process, as its row in the workers table says."""

    worker_id: str
    host: str
    pid: int
    queues: list[str]
    version: str
    started_at: datetime
    last_seen: datetime
    silent_for: float
    status: Literal["alive", "gone"]
    gone_after: float
    in_flight: int
    holding: list[int]

    @classmethod
    def of(cls, found: WorkerInfo) -> WorkerBody:
        return cls(**found.__dict__)


class Workers(BaseModel):
    workers: list[WorkerBody]
