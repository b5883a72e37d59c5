"""Queues: each one's figures and controls; pause, resume, purge; what is served."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from faststream_sqla.admin.api import MAX_THROUGHPUT_SPANS
from faststream_sqla.schema import BreakerState

from ..models import (
    Changed,
    Info,
    Purged,
    QueueList,
    QueueOverview,
    ReplicaBanner,
    ThroughputBody,
)
from ..settings import settings_of
from .common import CHANGES, Admin, QueueName

router = APIRouter(tags=["queues"])


@router.get("/info")
async def info(request: Request) -> Info:
    """The database served (password masked), whether changes are refused, and the
    replica the figures are read from with its lag (null: the primary)."""
    settings = settings_of(request)
    return Info(
        database=settings.database,
        read_only=settings.read_only,
        version=request.app.version,
        replica=ReplicaBanner.of(await settings.admin.replica_lag()),
    )


@router.get("/queues")
async def list_queues(admin: Admin) -> QueueList:
    """Every queue with a queued or archived message: counts by state (capped), handled
    and failed in the last minute, the oldest ready message's age, paused, breaker; and
    how far behind its primary the replica they are read from is (null: the primary)."""
    lag = await admin.replica_lag()
    stats = await admin.queues()
    paused = set(await admin.paused_queues())
    breakers = {b.queue: b.state for b in await admin.breakers() if b.channel is None}
    return QueueList(
        queues=[
            QueueOverview.of(
                s,
                paused=s.queue in paused,
                breaker=breakers.get(s.queue, BreakerState.CLOSED.value),
            )
            for s in stats
        ],
        replica=ReplicaBanner.of(lag),
    )


@router.get("/queues/{queue}/throughput")
async def queue_throughput(
    queue: QueueName,
    admin: Admin,
    spans: Annotated[int, Query(ge=1, le=MAX_THROUGHPUT_SPANS)] = 12,
    span_seconds: Annotated[int, Query(ge=1, le=86_400)] = 300,
) -> ThroughputBody:
    """The queue's messages archived (any final state) in each of `spans` spans of
    `span_seconds`, oldest first (default: the last hour in five-minute spans)."""
    found = await admin.throughput(queue, spans=spans, span_seconds=span_seconds)
    return ThroughputBody.of(found)


@router.post("/queues/{queue}/pause", dependencies=CHANGES)
async def pause_queue(queue: QueueName, admin: Admin) -> Changed:
    """Stop every consumer of the queue from claiming (publishing goes on)."""
    return Changed(changed=await admin.pause_queue(queue))


@router.post("/queues/{queue}/resume", dependencies=CHANGES)
async def resume_queue(queue: QueueName, admin: Admin) -> Changed:
    return Changed(changed=await admin.resume_queue(queue))


@router.post("/queues/{queue}/purge", dependencies=CHANGES)
async def purge_queue(queue: QueueName, admin: Admin) -> Purged:
    """Delete the queue's waiting messages (never those in flight)."""
    return Purged(deleted=await admin.purge(queue))
